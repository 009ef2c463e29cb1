"""``[[sources]]``: where a job's items may be fetched from by name (a directory or
an HTTP server) and how patiently, as settings, with the checks of each.

The settings are the configuration's; the fetchers (:mod:`casesignd.files.sources`)
read this one struct, so the config needs nothing of their code.
"""

from __future__ import annotations

import msgspec


class Source(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    name: str
    kind: str  # "dir" or "http"
    root: str = ""
    base_url: str = ""
    connect_timeout_s: float = 5.0
    read_timeout_s: float = 30.0
    max_attempts: int = 4
    base_delay_s: float = 0.2
    # Cap of one backoff delay, and of a server's Retry-After that we honour.
    max_delay_s: float = 5.0
    retry_after_cap_s: float = 30.0

    def problems(self) -> list[tuple[str, str]]:
        """(key, what is wrong) for each setting its kind cannot work with."""
        if self.kind not in ("dir", "http"):
            return [("kind", f"expected 'dir' or 'http', got {self.kind!r}")]
        if self.kind == "dir" and not self.root:
            return [("root", "a dir source needs a root")]
        if self.kind == "http" and not self.base_url.startswith(("http://", "https://")):
            return [("base_url", "an http source needs an http(s) URL")]
        return []
