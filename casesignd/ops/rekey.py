"""``casesignd store rekey``: every data key of the store rewrapped under the current
storage key (``storage.key_id``), the sealed data itself never rewritten.

After a new key becomes current (the old one moved to ``[[storage.old_keys]]``), new
objects and artifacts are wrapped under it at once; this rewraps the rest, a batch per
transaction, each row only while it is still under the key it was read with, so it is
idempotent (a second run rewraps nothing), resumable (a run cut short leaves every row
under one key or the other, and the next run takes the rest) and safe beside running
daemons (PostgreSQL, or SQLite without taking its lock: the daemon's writer and this
one take turns). Once it reports nothing left under an old key id, that key may go
from the configuration; a daemon refuses to start while the store still needs it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from casesignd.config import Config
from casesignd.core.errors import ConfigError
from casesignd.core.keyring import Keyring, KeyUnavailable
from casesignd.store import Store
from casesignd.store.records import Rewrap

BATCH = 500

Say = Callable[[str], None]


@dataclass
class RekeyReport:
    """What a rekey found and did."""

    current: str
    before: dict[str, int] = field(default_factory=dict)
    after: dict[str, int] = field(default_factory=dict)
    rewrapped: int = 0

    def lines(self) -> list[str]:
        """The report for people."""
        def ids(counts: dict[str, int]) -> str:
            return ", ".join(f"{k} {n}" for k, n in counts.items()) or "none"

        old = sum(n for k, n in self.after.items() if k != self.current)
        return [f"data keys before, by key id: {ids(self.before)}",
                f"rewrapped under {self.current}: {self.rewrapped}",
                f"data keys now, by key id: {ids(self.after)}",
                "nothing is left under an old key: old keys may leave the configuration"
                if not old else f"{old} data key(s) still under an old key: run it again"]


async def rekey(store: Store, keyring: Keyring, *, batch: int = BATCH,
                say: Say = lambda _line: None) -> RekeyReport:
    """Rewrap every data key of ``store`` not under ``keyring``'s current key."""
    if keyring.current is None:
        raise ConfigError("storage.key_file", "store rekey needs a current key "
                          "(storage.key_file and storage.key_id)")
    report = RekeyReport(keyring.current, before=await store.data_key_ids())
    missing = sorted(set(report.before) - keyring.ids)
    if missing:
        raise ConfigError("storage.old_keys",
                          f"the store holds data keys wrapped under key id(s) "
                          f"{', '.join(missing)}, which the configuration does not name: "
                          "add them as [[storage.old_keys]] to rewrap them")
    for inline in (False, True):
        after = ""
        while rows := await store.data_keys_to_rewrap(keyring.current, after, batch, inline):
            try:
                changes = [Rewrap(k.owner, k.key_id, keyring.wrap(keyring.open(k), k.owner),
                                  inline) for k in rows]
            except KeyUnavailable as e:
                raise ConfigError("storage.old_keys", str(e)) from None
            report.rewrapped += await store.rewrap_data_keys(changes)
            after = rows[-1].owner.removeprefix("artifact:") if inline else rows[-1].owner
            say(f"rewrapped {report.rewrapped}")
    report.after = await store.data_key_ids()
    return report


async def rekey_configured(cfg: Config, say: Say = lambda _line: None) -> RekeyReport:
    """:func:`rekey` on the store ``cfg`` names, with the keys it names."""
    from casesignd.store import make_store
    from casesignd.store.sqlite import SqliteStore

    keyring = cfg.storage_keyring()
    if cfg.store.kind == "sqlite":
        # Beside a running daemon: its lock is for daemons, and the writers take turns.
        store: Store = SqliteStore(cfg.path(cfg.store.path),
                                   busy_timeout_ms=cfg.store.busy_timeout_ms, exclusive=False)
    else:
        store = make_store(cfg)
    await store.open()
    try:
        return await rekey(store, keyring, say=say)
    finally:
        await store.close()
