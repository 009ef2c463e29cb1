"""Configuration: typed settings, and one clear line naming the key when it is wrong."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import msgspec
import pytest

from casesignd import config
from casesignd.core.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]


def test_the_example_config_loads_and_names_every_setting():
    text = (ROOT / "config.example.toml").read_text()
    cfg = config.load(ROOT / "config.example.toml")
    assert cfg.default_policy == "contract-v1"

    def walk(struct_type: type, prefix: str) -> list[str]:
        out = []
        for f in msgspec.structs.fields(struct_type):
            if f.name == "base_dir":
                continue
            out.append(prefix + f.name)
        return out

    for section in ("server", "store", "storage", "workers", "retry", "signing", "links",
                    "scanner", "kiosk", "invoice", "logging", "validation", "archive"):
        assert f"[{section}]" in text, section
    for name in walk(config.Workers, ""):
        assert f"\n{name} =" in text, name


_TENANT = f"[[tenants]]\nname = 'a'\ntoken_sha256 = '{'a' * 64}'\n"


@pytest.mark.parametrize("text,key", [
    ("[workers]\nconcurrency = 0\n", "workers.concurrency"),
    ("[workers]\nconcurrency = 'four'\n", "workers.concurrency"),
    ("[workers]\nconcurency = 4\n", "workers"),
    ("[server]\nlisten = 'localhost'\n", "server.listen"),
    ("[server]\nevent_loop = 'tokio'\n", "server.event_loop"),
    ("default_policy = 'nope'\n", "default_policy"),
    ("[[tenants]]\nname = 'a'\ntoken_sha256 = 'abc'\n", "tenants[0].token_sha256"),
    ("[[sources]]\nname = 's'\nkind = 'ftp'\n", "sources[0].kind"),
    ("[workers]\nheartbeat_s = 40.0\nlease_s = 30.0\n", "workers.heartbeat_s"),
    ("this is = not toml [", "(file)"),
    ("[store]\nkind = 'mysql'\n", "store.kind"),
    ("[store]\nkind = 'postgres'\n", "store.dsn"),
    ("[store]\nkind = 'postgres'\ndsn = 'host=db bogus=1'\n", "store.dsn"),
    ("[store]\nkind = 'postgres'\ndsn = 'host=db password=hunter2'\n", "store.dsn"),
    ("[store]\nkind = 'postgres'\ndsn = 'postgresql://casesignd:hunter2@db/casesignd'\n", "store.dsn"),
    ("[store]\ndsn = 'host=db'\n", "store.dsn"),
    ("[store]\npassword_file = 'db.pass'\n", "store.password_file"),
    # A limit no store integer holds (and no client reads exactly) made every
    # admission and upload of the tenant a 500.
    (_TENANT + "[tenants.limits]\nmax_queued = 9223372036854775808\n",
     "tenants[0].limits.max_queued"),
    (_TENANT + "[tenants.limits]\nupload_bytes = 9007199254740992\n",
     "tenants[0].limits.upload_bytes"),
    (_TENANT + "[tenants.limits]\nadmit_window_s = 9007199254740992\n",
     "tenants[0].limits.admit_window_s"),
])
def test_bad_config_names_the_key(text, key):
    with pytest.raises(ConfigError) as e:
        config.loads(text)
    assert e.value.key == key or e.value.key.startswith(key), (e.value.key, e.value.message)


def test_bad_config_stops_the_daemon_before_it_listens_with_one_line(tmp_path):
    bad = tmp_path / "config.toml"
    bad.write_text("[workers]\nconcurrency = -1\n")
    proc = subprocess.run([sys.executable, "-m", "casesignd", "serve", "--config", str(bad)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "workers.concurrency" in lines[0], proc.stderr


def test_credentials_directory_is_searched_for_bare_names(tmp_path, monkeypatch):
    creds = tmp_path / "creds"
    creds.mkdir()
    (creds / "signing.p12").write_bytes(b"x")
    cfg = config.loads("", base_dir=str(tmp_path))
    monkeypatch.setenv("CREDENTIALS_DIRECTORY", str(creds))
    assert cfg.credential("signing.p12") == creds / "signing.p12"
    assert cfg.credential("other.p12") == tmp_path / "other.p12"


def test_a_postgres_store_reads_its_password_from_the_credentials_directory(tmp_path, monkeypatch):
    creds = tmp_path / "creds"
    creds.mkdir()
    (creds / "db.pass").write_text("from-credentials\n")
    (tmp_path / "db.pass").write_text("beside-the-config\n")
    text = "[store]\nkind = 'postgres'\ndsn = 'postgresql:///casesignd?host=/run/postgresql'\npassword_file = 'db.pass'\n"
    cfg = config.loads(text, base_dir=str(tmp_path))
    assert cfg.store_password() == "beside-the-config"
    monkeypatch.setenv("CREDENTIALS_DIRECTORY", str(creds))
    assert cfg.store_password() == "from-credentials"
    assert config.loads("", base_dir=str(tmp_path)).store_password() is None
    missing = config.loads(text.replace("db.pass", "nope.pass"), base_dir=str(tmp_path))
    with pytest.raises(ConfigError) as e:
        missing.store_password()
    assert e.value.key == "store.password_file"


def test_every_setting_in_the_example_has_its_own_comment():
    text = (ROOT / "config.example.toml").read_text()
    assert "# See " not in text, "a setting lacks its comment in casesignd/ops/init.py"
