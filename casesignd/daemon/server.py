"""The daemon's entry point: the aiohttp application wired to its services and routes,
the listening socket (or systemd's), signals, the watchdog, and the exit status.

:mod:`casesignd.daemon.lifecycle` owns the services and their lifecycle; :mod:`casesignd.http.api` and
:mod:`casesignd.http.kiosk` hold the handlers. This module is the only one that knows all
three, so none of them needs another.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path

import uvloop
from aiohttp import web

from casesignd import config as config_mod
from casesignd.config import Config
from casesignd.core import logs
from casesignd.core.errors import CasesignError, ConfigError
from casesignd.core.logs import log_event
from casesignd.daemon.lifecycle import SERVICES, Extras, Services, lifecycle
from casesignd.http import admin, api, cases, console, kiosk
from casesignd.http import runner as wire
from casesignd.http import services as handlers
from casesignd.invoices import branding
from casesignd.observability import sdnotify

log = logging.getLogger("casesignd.daemon.server")


def build_app(cfg: Config, node: str | None = None,
              extras: Extras | None = None) -> web.Application:
    """The aiohttp application with every service attached and its lifecycle, and
    ``extras`` plugged in beside the daemon's own parts."""
    services = Services(cfg, node, extras)
    app = web.Application(
        client_max_size=cfg.server.max_json_bytes,
        middlewares=api.middlewares(services),
        # keepalive_timeout also runs from a connection's start until its request's
        # headers are in, so a client that sends headers byte by byte (or nothing) is
        # cut off after server.request_timeout_s; bodies are timed where they are read.
        handler_args={"max_field_size": 16384, "max_line_size": 16384,
                      "keepalive_timeout": cfg.server.request_timeout_s},
    )
    app[SERVICES] = services
    # The same services as the handlers see them: a protocol they are written against.
    app[handlers.SERVICES] = services
    app.on_response_prepare.append(wire.server_header)
    app.cleanup_ctx.append(lifecycle)
    api.add_routes(app)
    cases.add_routes(app)
    console.add_routes(app)
    admin.add_routes(app)
    app.router.add_post("/v1/sign", kiosk.post_sign)
    return app


def _read_config(config_path: str, logo_dir: Path) -> tuple[Config, branding.Branding]:
    """The config file and the invoice settings it names, checked (blocking: it reads
    the files and keeps the logos)."""
    fresh = config_mod.load(config_path)
    return fresh, branding.load(fresh, logo_dir)


async def reload(services: Services, config_path: str) -> None:
    """SIGHUP: re-read tenants (their tokens and limits among them), the operator's
    token, policies, webhook endpoints and invoice settings (logos too); running and
    accepted jobs are untouched. A config with any error is refused whole.
    The files are read off the event loop; the settings change on it, at once."""
    try:
        fresh, settings = await asyncio.to_thread(
            _read_config, config_path, branding.logo_dir_of(services.config))
    except ConfigError as e:
        log_event(log, "config.reload_refused", level=logging.ERROR, error=str(e))
        return
    cfg = services.config
    cfg.tenants = fresh.tenants
    cfg.policies = fresh.policies
    cfg.default_policy = fresh.default_policy
    cfg.invoice = fresh.invoice
    cfg.operator = fresh.operator
    services.branding = settings
    services.load_tenants(cfg)
    # A first endpoint starts the webhook sender; the addresses it may reach follow.
    services.webhooks.follow_config()
    log_event(log, "config.reloaded", count=len(fresh.tenants))


async def _serve(cfg: Config, config_path: str, listen: str | None, node: str | None,
                 extras: Extras | None) -> int:
    app = build_app(cfg, node, extras)
    services = app[SERVICES]
    runner = wire.Runner(app, refused=services.metrics.rejection, access_log=None,
                         handle_signals=False, shutdown_timeout=cfg.workers.shutdown_grace_s)
    await runner.setup()
    fds = sdnotify.listen_fds()
    if fds:
        site: web.BaseSite = web.SockSite(runner, fds[0])
    else:
        host, _, port = (listen or cfg.server.listen).rpartition(":")
        site = web.TCPSite(runner, host.strip("[]"), int(port), reuse_address=True)
    try:
        await site.start()
    except OSError as e:
        log_event(log, "server.listen_failed", level=logging.ERROR, error=str(e))
        await runner.cleanup()
        return 1
    loop = asyncio.get_running_loop()
    log_event(log, "server.listening", route=site.name, node=services.node,
              event_loop="uvloop" if isinstance(loop, uvloop.Loop) else "asyncio")
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)

    reloading = asyncio.Lock()  # one reload at a time, in the order the signals came
    reloads: set[asyncio.Task[None]] = set()

    async def hup() -> None:
        async with reloading:
            services.notifier.reloading()
            await reload(services, config_path)
            services.notifier.ready()

    def on_hup() -> None:
        task = asyncio.ensure_future(hup())
        reloads.add(task)
        task.add_done_callback(reloads.discard)

    loop.add_signal_handler(signal.SIGHUP, on_hup)
    progress = sdnotify.ProgressTracker(stall_s=max(60.0, cfg.workers.lease_s * 2))

    async def probe() -> bool:
        await services.store.ping()
        pool = services.pool
        if not pool.started:
            return False
        return progress.healthy(len(pool.running), pool.progress, time.monotonic())

    watchdog = sdnotify.Watchdog.from_env(services.notifier, probe)
    # What start-up built (modules, configuration, the app) lives as long as the
    # daemon: frozen out of the collector's sight, so that a full collection, which
    # stops the event loop, costs what requests left behind rather than the whole heap.
    gc.collect()
    gc.freeze()
    services.notifier.ready("accepting jobs")
    if watchdog:
        watchdog.start()
    await stop.wait()
    services.notifier.stopping("draining")
    log_event(log, "server.stopping")
    services.shutting_down = True
    if watchdog:
        await watchdog.stop()
    await runner.cleanup()
    log_event(log, "server.stopped")
    return 0


def loop_factory(name: str) -> Callable[[], asyncio.AbstractEventLoop] | None:
    """The event loop ``server.event_loop`` names; None is asyncio's own."""
    if name == "uvloop":
        return uvloop.new_event_loop
    return None


def serve(config_path: str, listen: str | None = None, node: str | None = None,
          extras: Extras | None = None) -> int:
    """Run the daemon until SIGTERM; the exit status for the command line. ``extras``:
    parts plugged in beside the daemon's own (the test suite's; none for ``serve``)."""
    try:
        cfg = config_mod.load(config_path)
    except ConfigError as e:
        print(f"config error: {e.key}: {e.message}", file=sys.stderr)
        return 2
    logs.configure(cfg.logging.level)
    # Everything the daemon writes (working files, signed PDFs, the store) holds case
    # documents: private to the service user, whichever library creates the file.
    # Set before the CPU worker processes start, which inherit it.
    os.umask(0o077)
    # The store's writer and the file threads wake from a commit or an fsync wanting
    # the GIL while the event loop holds it; by default they wait up to 5 ms for it,
    # which would put 5 ms on every durable step of a kiosk request.
    sys.setswitchinterval(0.0005)
    try:
        with asyncio.Runner(loop_factory=loop_factory(cfg.server.event_loop)) as runner:
            return runner.run(_serve(cfg, config_path, listen, node, extras))
    except ConfigError as e:
        print(f"config error: {e.key}: {e.message}", file=sys.stderr)
        return 2
    except CasesignError as e:
        print(f"cannot start: {e.code}: {e.message}", file=sys.stderr)
        return 1
