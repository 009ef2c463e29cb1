"""The cost of each PAdES level, beside pyHanko's own B-LTA signing, in one run.

``scripts/bench sign --level B-LTA`` (batch jobs) and ``scripts/bench kiosk --level
B-LTA`` (kiosk requests, one kiosk at a time: the idle latency) run casesignd at
every level up to the one asked, against a whole test PKI on loopback (Certomancer:
OCSP responders, CRLs and a TSA, served from this process), then pyHanko signing
the same one-page PDF at B-LTA itself (``PdfSigner`` with ``embed_validation_info``
and ``use_pades_lta``, one validation context shared across signatures, so that it
also reuses fetched revocation data). The table says per signature: latency
percentiles, the daemon's CPU (all its processes), and the requests the PKI saw
(TSA, OCSP, CRL). The last line is one JSON object of the figures.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import resource
import sys
import tempfile
import time
from io import BytesIO
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchlib.e2e import aiohttp_client, tree_cpu_s  # noqa: E402  (scripts/, beside this file)

from casesignd.ops import devpki  # noqa: E402
from tests.daemon import Daemon, multipart  # noqa: E402
from tests.helpers_ltv import LtvPki, serve_ltv_pki  # noqa: E402
from tests.helpers_pki import reportlab_pdf  # noqa: E402
from tests.helpers_tsa import LocalTsa  # noqa: E402

LEVELS = ("B-B", "B-T", "B-LT", "B-LTA")
SIGNERS = [{"id": "s-1", "name": "Bench Signer", "role": "buyer"}]


def percentile(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))] if s else float("nan")


def pki_delta(pki: LtvPki, before: Any, n: int) -> dict[str, float]:
    diff = pki.requests - before
    return {k: round(diff.get(k, 0) / max(1, n), 2) for k in ("tsa", "ocsp", "crl", "certs")}


def daemon_for(pki: LtvPki, workdir: Path, level: str, jobs: int, tsa_url: str) -> Daemon:
    cfg = pki.casesignd_config("signer", level=level)
    for policy in cfg["policies"]:
        if "tsa_url" in policy:
            policy["tsa_url"] = tsa_url
    d = Daemon(workdir / level, {**cfg, "logging": {"level": "warning"},
                                 "workers": {"concurrency": 8, "max_queue_depth": jobs + 50}},
               test_parts=False)
    d.start()
    return d


def kiosk_idle(d: Daemon, doc: bytes, duration_s: float, warm: int = 5) -> tuple[list[float], int]:
    """One kiosk, each request after the previous answer, for ``duration_s``."""
    import http.client

    lat: list[float] = []
    conn = http.client.HTTPConnection("127.0.0.1", d.port, timeout=30)
    n = 0
    stop = time.monotonic() + duration_s
    try:
        while n < warm or time.monotonic() < stop:
            n += 1
            body, ctype = multipart({"case_id": f"LVL-{n}", "signers": SIGNERS}, doc)
            t = time.perf_counter()
            conn.request("POST", "/v1/sign", body, {"Authorization": f"Bearer {d.token}",
                                                    "Content-Type": ctype})
            resp = conn.getresponse()
            payload = resp.read()
            took = time.perf_counter() - t
            if resp.status != 200:
                raise RuntimeError(f"kiosk answered {resp.status}: {payload[:300]!r}")
            if n > warm:
                lat.append(took)
    finally:
        conn.close()
    return lat, n - warm


def measure_casesignd(mode: str, pki: LtvPki, workdir: Path, level: str, doc: bytes,
                      args: argparse.Namespace) -> dict[str, Any]:
    d = daemon_for(pki, workdir, level, args.jobs, args.tsa_url)
    try:
        assert d.proc is not None
        if mode == "kiosk":
            kiosk_idle(d, doc, 0.0, warm=5)  # processes started, chains' data cached
            before, cpu0 = pki.requests.copy(), tree_cpu_s(d.proc.pid)
            lat, n = kiosk_idle(d, doc, args.duration_s, warm=0)
            cpu = tree_cpu_s(d.proc.pid) - cpu0
            return {"who": "casesignd kiosk", "level": level, "n": n,
                    "p50_ms": round(percentile(lat, 0.5) * 1000, 1),
                    "p95_ms": round(percentile(lat, 0.95) * 1000, 1),
                    "p99_ms": round(percentile(lat, 0.99) * 1000, 1),
                    "max_ms": round(max(lat) * 1000, 1),
                    "per_s": round(n / sum(lat), 1),
                    "cpu_ms": round(cpu * 1000 / n, 2), **pki_delta(pki, before, n)}
        sha = hashlib.sha256(doc).hexdigest()
        r = d.request("PUT", f"/v1/cases/E2E-1/objects/{sha}", raw=doc,
                      headers={"Content-Type": "application/pdf"})
        assert r.status in (200, 201), r.body
        warm = aiohttp_client([d.url], d.token, [(sha, len(doc))], 8, "warm")
        assert all(j["state"] == "ready" for j in warm), warm
        before, cpu0 = pki.requests.copy(), tree_cpu_s(d.proc.pid)
        t = time.perf_counter()
        done = aiohttp_client([d.url], d.token, [(sha, len(doc))], args.jobs, "run")
        wall = time.perf_counter() - t
        cpu = tree_cpu_s(d.proc.pid) - cpu0
        bad = [j for j in done if j["state"] != "ready"]
        assert not bad, bad[:2]
        total = [j["timings"]["total_ms"] for j in done]
        return {"who": "casesignd batch", "level": level, "n": len(done),
                "p50_ms": round(percentile(total, 0.5), 1),
                "p95_ms": round(percentile(total, 0.95), 1),
                "p99_ms": round(percentile(total, 0.99), 1), "max_ms": round(max(total), 1),
                "per_s": round(len(done) / wall, 1), "cpu_ms": round(cpu * 1000 / len(done), 2),
                **pki_delta(pki, before, len(done))}
    finally:
        d.stop()


def measure_pyhanko(pki: LtvPki, doc: bytes, n: int, tsa_url: str) -> dict[str, Any]:
    """pyHanko signing at B-LTA in this process, one signature after another."""
    import aiohttp
    from pyhanko.pdf_utils.incremental_writer import IncrementalPdfFileWriter
    from pyhanko.sign import PdfSignatureMetadata, PdfSigner, SimpleSigner
    from pyhanko.sign.fields import SigSeedSubFilter
    from pyhanko.sign.timestamps import HTTPTimeStamper

    s = pki["signer"]
    signer = SimpleSigner.load_pkcs12(str(s.pkcs12), passphrase=s.password)

    async def run() -> tuple[list[float], float]:
        lat: list[float] = []
        async with (contextlib.aclosing(pki.validation_context()) as vc,
                    aiohttp.ClientSession() as session):
            meta = PdfSignatureMetadata(field_name="Signature1", subfilter=SigSeedSubFilter.PADES,
                                        embed_validation_info=True, use_pades_lta=True,
                                        validation_context=vc)
            pdf_signer = PdfSigner(meta, signer,
                                   timestamper=HTTPTimeStamper(tsa_url, session=session))
            for i in range(n + 3):
                if i == 3:
                    cpu0 = resource.getrusage(resource.RUSAGE_SELF)
                t = time.perf_counter()
                await pdf_signer.async_sign_pdf(IncrementalPdfFileWriter(BytesIO(doc)),
                                                output=BytesIO())
                if i >= 3:
                    lat.append(time.perf_counter() - t)
            cpu1 = resource.getrusage(resource.RUSAGE_SELF)
        # This process also serves the PKI (OCSP, TSA): its CPU is counted here too.
        return lat, (cpu1.ru_utime + cpu1.ru_stime) - (cpu0.ru_utime + cpu0.ru_stime)

    before = pki.requests.copy()
    lat, cpu = asyncio.run(run())
    return {"who": "pyHanko in-process", "level": "B-LTA", "n": n,
            "p50_ms": round(percentile(lat, 0.5) * 1000, 1),
            "p95_ms": round(percentile(lat, 0.95) * 1000, 1),
            "p99_ms": round(percentile(lat, 0.99) * 1000, 1), "max_ms": round(max(lat) * 1000, 1),
            "per_s": round(n / sum(lat), 1), "cpu_ms": round(cpu * 1000 / n, 2),
            **pki_delta(pki, before, n + 3)}


def table(rows: list[dict[str, Any]]) -> str:
    cols = ["who", "level", "n", "per_s", "p50_ms", "p95_ms", "p99_ms", "max_ms", "cpu_ms",
            "tsa", "ocsp", "crl", "certs"]
    widths = [max(len(c), *(len(str(r.get(c, ""))) for r in rows)) for c in cols]
    lines = ["  ".join(c.ljust(w) for c, w in zip(cols, widths, strict=True))]
    lines.append("  ".join("-" * w for w in widths))
    for r in rows:
        lines.append("  ".join(str(r.get(c, "")).ljust(w) for c, w in zip(cols, widths, strict=True)))
    return "\n".join(lines)


def main(mode: str, argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog=f"scripts/bench {mode} --level")
    ap.add_argument("--level", choices=LEVELS, required=True)
    ap.add_argument("--jobs", type=int, default=200, help="batch jobs per level (sign)")
    ap.add_argument("--duration-s", type=float, default=10.0, help="per level (kiosk)")
    ap.add_argument("--pyhanko-n", type=int, default=40, help="pyHanko's B-LTA signatures")
    ap.add_argument("--tsa", choices=("local", "certomancer"), default="local",
                    help="local: a small RFC 3161 server with the PKI's TSA key (about a "
                    "millisecond an answer); certomancer: Certomancer's own (about 30 ms)")
    args = ap.parse_args(argv)
    levels = LEVELS[:LEVELS.index(args.level) + 1]
    with tempfile.TemporaryDirectory(prefix="casesignd-levels-") as tmp:
        workdir = Path(tmp)
        doc = reportlab_pdf(workdir / "doc.pdf").read_bytes()
        pki_dir = workdir / "pki"
        pki_dir.mkdir()
        with serve_ltv_pki(pki_dir, kind="ec") as pki, contextlib.ExitStack() as stack:
            args.tsa_url = pki.tsa_url
            if args.tsa == "local":
                t = pki["tsa"]
                local = stack.enter_context(
                    LocalTsa(devpki.Identity(t.key, t.cert, [pki.intermediate])))
                args.tsa_url = local.url
            rows = [measure_casesignd(mode, pki, workdir, level, doc, args) for level in levels]
            rows.append(measure_pyhanko(pki, doc, args.pyhanko_n, args.tsa_url))
    print(f"PAdES levels, {mode}: one-page PDF, EC P-256 keys, PKI on loopback, "
          f"{args.tsa} TSA")
    print("(per signature: cpu_ms is casesignd's processes, or pyHanko's process with the PKI;"
          " tsa/ocsp/crl/certs are requests the PKI saw)")
    print(table(rows))
    print(json.dumps({"bench": f"{mode}-levels", "rows": rows}))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "kiosk", sys.argv[2:])
