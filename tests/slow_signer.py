"""A signing key that takes its time: every signature waits first.

Not part of casesignd: the test suite wraps the daemon's key in it (tests/serve.py,
``--sign-delay-ms``) to hold a job or a kiosk request at the key while it kills the
daemon, fills the key slots or lets a deadline pass.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    from cryptography import x509


class SlowSigner:
    """Delays every signature by ``delay_s``. Wraps the daemon's signer (a
    :class:`casesignd.signing.keys.KeySigner`) or a worker process's key, which has no
    certificate: only a wrapped signer's is ever read. Pickles (to the worker
    processes) as what it wraps and its delay."""

    cert: x509.Certificate
    chain: list[x509.Certificate]

    def __init__(self, inner: Any, delay_s: float) -> None:
        self._inner = inner
        self._delay_s = delay_s
        self.cert = cast("x509.Certificate", getattr(inner, "cert", None))
        self.chain = getattr(inner, "chain", [])
        self.algorithm: str = getattr(inner, "algorithm", "rsa")

    def __getstate__(self) -> tuple[Any, float]:
        return self._inner, self._delay_s

    def __setstate__(self, state: tuple[Any, float]) -> None:
        self.__init__(*state)  # type: ignore[misc]

    def sign(self, data: bytes) -> bytes:
        time.sleep(self._delay_s)
        return self._inner.sign(data)

    def for_process(self) -> Any:
        """The key for a worker process, slowed alike (None: the key stays here)."""
        for_process = getattr(self._inner, "for_process", None)
        return SlowSigner(for_process(), self._delay_s) if for_process is not None else None
