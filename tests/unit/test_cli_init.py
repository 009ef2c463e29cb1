"""`casesignd init` and the command line's own parts: what a user gets on disk."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import subprocess
import sys
import tomllib
from pathlib import Path

import msgspec
import pytest

from casesignd import config
from casesignd.cli import commands as cli
from casesignd.cli.client import parse_env_file
from casesignd.core.errors import ConfigError
from casesignd.core.source_settings import Source
from casesignd.ops import init as bootstrap

SECRETS = ("signing.p12", "signing.pass", "link.secret", "client.env", "config.toml")


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def _snapshot(d: Path) -> dict[str, tuple[bytes, int, int]]:
    return {
        str(p.relative_to(d)): (p.read_bytes() if p.is_file() else b"", p.stat().st_mtime_ns,
                                _mode(p))
        for p in sorted(d.rglob("*"))
    }


@pytest.fixture(scope="module")
def setup_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One init shared by the read-only tests (key generation is the slow part)."""
    d = tmp_path_factory.mktemp("init") / "state"
    assert cli.main(["init", "--dir", str(d)]) == 0
    return d


def test_init_writes_a_loadable_config(setup_dir: Path) -> None:
    cfg = config.load(setup_dir / "config.toml")
    assert cfg.server.listen == "127.0.0.1:8787"
    assert cfg.path(cfg.store.path) == setup_dir.resolve() / "casesignd.db"
    assert cfg.path(cfg.storage.temp_dir) == setup_dir.resolve() / "tmp"
    assert cfg.path(cfg.storage.state_dir) == setup_dir.resolve()
    assert cfg.path(cfg.storage.temp_dir).is_dir()
    assert cfg.credential(cfg.signing.pkcs12_path).is_file()
    assert cfg.credential(cfg.signing.pkcs12_password_file).is_file()
    assert len(cfg.path(cfg.links.secret_file).read_bytes()) == 32
    assert [t.name for t in cfg.tenants] == ["default"]


def test_modes(setup_dir: Path) -> None:
    assert _mode(setup_dir) == 0o700
    assert _mode(setup_dir / "tmp") == 0o700
    for name in SECRETS:
        assert _mode(setup_dir / name) == 0o600, name


def test_token_hash_matches_client_env(setup_dir: Path) -> None:
    env = parse_env_file((setup_dir / "client.env").read_text())
    assert env["CASESIGND_URL"] == "http://127.0.0.1:8787"
    token = env["CASESIGND_TOKEN"]
    assert token.startswith("csd_") and len(token) > 40
    cfg = config.load(setup_dir / "config.toml")
    assert cfg.tenants[0].token_sha256 == hashlib.sha256(token.encode()).hexdigest()
    # The token itself is nowhere but client.env.
    for p in setup_dir.iterdir():
        if p.is_file() and p.name != "client.env":
            assert token.encode() not in p.read_bytes(), p.name


def _signing_identity(setup_dir: Path):
    from cryptography.hazmat.primitives.serialization import pkcs12

    password = (setup_dir / "signing.pass").read_bytes()
    return pkcs12.load_key_and_certificates((setup_dir / "signing.p12").read_bytes(), password)


def test_signing_key_chains_to_the_ca_and_the_ca_key_is_not_kept(setup_dir: Path) -> None:
    from cryptography import x509
    from cryptography.hazmat.primitives.asymmetric import ec

    ca = x509.load_pem_x509_certificate((setup_dir / "ca.pem").read_bytes())
    key, cert, extra = _signing_identity(setup_dir)
    assert key is not None and cert is not None
    # ECDSA P-256 unless asked otherwise: the cheapest signature a kiosk can get.
    assert isinstance(key, ec.EllipticCurvePrivateKey) and key.curve.name == "secp256r1"
    assert isinstance(ca.public_key(), ec.EllipticCurvePublicKey)
    cert.verify_directly_issued_by(ca)
    assert [c.subject for c in extra] == [ca.subject]
    assert b"PRIVATE KEY" not in (setup_dir / "ca.pem").read_bytes()
    assert not list(setup_dir.glob("*.key"))


def test_init_makes_an_rsa_key_when_asked(tmp_path: Path) -> None:
    from cryptography import x509
    from cryptography.hazmat.primitives.asymmetric import rsa

    assert cli.main(["init", "--dir", str(tmp_path / "s"), "--key-type", "rsa"]) == 0
    key, cert, _ = _signing_identity(tmp_path / "s")
    assert isinstance(key, rsa.RSAPrivateKey) and key.key_size == 2048
    cert.verify_directly_issued_by(x509.load_pem_x509_certificate((tmp_path / "s" / "ca.pem").read_bytes()))


def test_init_refuses_an_unknown_key_type(tmp_path: Path) -> None:
    with pytest.raises(ConfigError):
        bootstrap.init_dir(tmp_path / "s", key_type="dsa")
    assert not (tmp_path / "s").exists()


def test_every_setting_is_written_and_commented(setup_dir: Path) -> None:
    text = (setup_dir / "config.toml").read_text()
    live = tomllib.loads(text)

    def check(cls: type[msgspec.Struct], section: str, table: dict | None) -> None:
        for f in msgspec.structs.fields(cls):
            sub = bootstrap._struct_of(f.type) or bootstrap._list_struct_of(f.type)
            key = f"{section}.{f.name}" if section else f.name
            if f.name == "base_dir":
                continue
            if sub is not None:
                value = (table or {}).get(f.name)
                item = value[0] if isinstance(value, list) and value else value
                check(sub, key, item if isinstance(item, dict) else None)
            elif table is not None:
                assert f.name in table, key
            else:  # a commented-out example section
                assert f"# {f.name} = " in text, key

    check(config.Config, "", live)
    # Every live key line has a comment line right above it.
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if " = " in line and not line.startswith("#"):
            assert lines[i - 1].startswith("#"), line


def test_render_config_round_trips() -> None:
    cfg = bootstrap.local_config("0.0.0.0:9000", "b" * 64)
    cfg.sources = [Source(name="s", kind="http", base_url="https://x.example/a")]
    cfg.invoice.issuer_address = ['1 "Quoted" St', "Town\\ville", "Zürich"]
    back = config.loads(bootstrap.render_config(cfg))
    back.base_dir = cfg.base_dir
    assert back == cfg


def test_setup_can_be_moved(setup_dir: Path, tmp_path: Path) -> None:
    moved = tmp_path / "elsewhere"
    shutil.copytree(setup_dir, moved)
    cfg = config.load(moved / "config.toml")
    assert cfg.path(cfg.store.path) == moved.resolve() / "casesignd.db"
    assert cfg.credential(cfg.signing.pkcs12_path) == moved.resolve() / "signing.p12"


def test_init_never_overwrites(setup_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = _snapshot(setup_dir)
    assert cli.main(["init", "--dir", str(setup_dir)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: already_exists: ")
    assert "config.toml" in err[0]
    assert _snapshot(setup_dir) == before


def test_init_refuses_when_any_file_it_would_write_exists(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    d = tmp_path / "s"
    d.mkdir()
    (d / "signing.p12").write_bytes(b"operator's own key")
    before = _snapshot(d)
    assert cli.main(["init", "--dir", str(d)]) == 1
    assert "signing.p12 already exists" in capsys.readouterr().err
    assert _snapshot(d) == before


def test_failed_init_leaves_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    from casesignd.ops import devpki

    real = bootstrap._write_new
    calls: list[Path] = []

    def failing(path: Path, data: bytes, mode: int) -> None:
        calls.append(path)
        if path.name == "client.env":
            raise OSError(28, "No space left on device", str(path))
        real(path, data, mode)

    monkeypatch.setattr(bootstrap, "_write_new", failing)
    monkeypatch.setattr(devpki, "new_key", lambda kind="rsa": devpki.ec.generate_private_key(
        devpki.ec.SECP256R1()))
    d = tmp_path / "s"
    assert cli.main(["init", "--dir", str(d)]) == 1
    assert "error: init_failed: cannot write" in capsys.readouterr().err
    assert not d.exists()
    assert any(p.name == "client.env" for p in calls)


def test_bad_listen_is_a_config_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    d = tmp_path / "s"
    assert cli.main(["init", "--dir", str(d), "--listen", "nope"]) == 2
    assert capsys.readouterr().err.startswith("config error: server.listen: ")
    assert not d.exists()


@pytest.mark.parametrize(
    ("listen", "url"),
    [
        ("127.0.0.1:8787", "http://127.0.0.1:8787"),
        ("0.0.0.0:9000", "http://127.0.0.1:9000"),
        (":9000", "http://127.0.0.1:9000"),
        ("[::]:9000", "http://[::1]:9000"),
        ("[::1]:9000", "http://[::1]:9000"),
        ("localhost:1", "http://localhost:1"),
    ],
)
def test_client_url(listen: str, url: str) -> None:
    assert bootstrap.client_url(listen) == url


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("seller-881:Acme Ltd:seller", {"id": "seller-881", "name": "Acme Ltd", "role": "seller"}),
        ("b:Doe: J.:buyer", {"id": "b", "name": "Doe: J.", "role": "buyer"}),
        ("nocolon", None),
        ("a::role", None),
        (":name:role", None),
        ("a:name:", None),
    ],
)
def test_parse_signer(text: str, want: dict | None) -> None:
    import argparse

    if want is None:
        with pytest.raises(argparse.ArgumentTypeError):
            cli.parse_signer(text)
    else:
        assert cli.parse_signer(text) == want


@pytest.mark.parametrize(
    ("name", "want"),
    [("contract.pdf", "contract.signed.pdf"), ("C.PDF", "C.signed.pdf"),
     ("scan", "scan.signed.pdf"), ("a.b.pdf", "a.b.signed.pdf")],
)
def test_default_signed_path(name: str, want: str) -> None:
    assert cli.default_signed_path(Path("/x") / name) == Path("/x") / want


def _run(args: list[str], **kw) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CASESIGND_")}
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=60,
                          env=env, **kw)


def test_help_works_and_stays_light() -> None:
    r = _run(["-m", "casesignd.cli.commands", "--help"])
    assert r.returncode == 0, r.stderr
    for command in ("init", "serve", "sign", "upload", "submit", "jobs", "audit", "store",
                    "verify"):
        assert command in r.stdout
    # --help must not pay for the daemon's or the PDF stack's imports.
    probe = ("import sys, contextlib, io\n"
             "from casesignd import cli\n"
             "with contextlib.redirect_stdout(io.StringIO()):\n"
             "    rc = cli.main(['--help'])\n"
             "heavy = [m for m in ('aiohttp', 'cryptography', 'pypdf', 'pyhanko', 'psycopg') "
             "if m in sys.modules]\n"
             "print(rc, heavy)\n")
    r = _run(["-c", probe])
    assert r.stdout.strip() == "0 []", r.stdout + r.stderr


def test_usage_errors_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main([]) == 2
    assert cli.main(["sign"]) == 2
    assert cli.main(["submit", "m.json", "--timeout", "-1"]) == 2
    assert cli.main(["jobs", "list", "--state", "lost"]) == 2
    capsys.readouterr()


def test_audit_verify_config_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "config.toml"
    bad.write_text("[workers]\nconcurrency = 'four'\n")
    assert cli.main(["audit", "verify", "--config", str(bad)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("config error: workers.concurrency: ") and "\n" not in err


def test_audit_verify_on_a_fresh_setup(setup_dir: Path, capsys: pytest.CaptureFixture[str]
                                       ) -> None:
    assert cli.main(["audit", "verify", "--config", str(setup_dir / "config.toml")]) == 1
    assert "error: no_store: no job store at " in capsys.readouterr().err


# --- audit verify, verify and serve: the CLI's side, with the modules they call ------


def _events_db(path: Path, n: int, tamper_seq: int | None = None) -> None:
    """A store file holding just an audit chain of ``n`` events."""
    import sqlite3

    from casesignd.core import audit

    conn = sqlite3.connect(path)
    conn.execute(f"CREATE TABLE events ({', '.join(audit.FIELDS)})")
    prev = audit.GENESIS
    for seq in range(1, n + 1):
        ev = {"event_id": f"ev-{seq}", "seq": seq, "job_id": "job-1", "tenant": "default",
              "case_id": "C-1", "type": "job.admitted", "actor": "api",
              "at": "2026-01-01T00:00:00.000000Z", "attempt": 0, "input_digest": None,
              "policy_version": "contract-v1", "detail": "{}", "prev_hash": prev}
        ev["hash"] = prev = audit.event_hash(ev)
        if seq == tamper_seq:
            ev["detail"] = '{"changed":true}'
        conn.execute(f"INSERT INTO events VALUES ({', '.join('?' * len(audit.FIELDS))})",
                     [ev[k] for k in audit.FIELDS])
    conn.commit()
    conn.close()


@pytest.mark.parametrize(
    ("tamper", "rc", "line"),
    [
        (None, 0, "audit chain intact: 3 events"),
        (2, 1, "audit chain broken at event seq=2 (event_id=ev-2, job_id=job-1): "
               "hash does not match the event's contents"),
    ],
)
def test_audit_verify(tmp_path: Path, capsys: pytest.CaptureFixture[str], tamper, rc, line
                      ) -> None:
    (tmp_path / "config.toml").write_text('[store]\npath = "jobs.db"\n')
    _events_db(tmp_path / "jobs.db", 3, tamper)
    assert cli.main(["audit", "verify", "--config", str(tmp_path / "config.toml")]) == rc
    assert capsys.readouterr().out == line + "\n"


def test_store_migrate_applies_the_sqlite_migrations(tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    from casesignd.store.sqlfiles import migrations

    (tmp_path / "config.toml").write_text('[store]\npath = "jobs.db"\n')
    latest = migrations()[-1][0]
    for _ in range(2):  # and again: nothing left to apply
        assert cli.main(["store", "migrate", "--config", str(tmp_path / "config.toml")]) == 0
        assert capsys.readouterr().out == f"job store {tmp_path / 'jobs.db'}: schema version {latest}\n"


class _Sig:
    def __init__(self, passed: bool, text: str) -> None:
        self.passed, self.text = passed, text

    def describe(self) -> str:
        return self.text


class _Report:
    def __init__(self, sigs: list[_Sig]) -> None:
        self.signatures = sigs
        self.passed = bool(sigs) and all(s.passed for s in sigs)
        self.findings = ()

    def to_json(self) -> dict:
        return {"signatures": [s.text for s in self.signatures], "passed": self.passed}


@pytest.mark.parametrize(
    ("sigs", "rc"),
    [
        ([_Sig(True, "sig 1: passed")], 0),
        ([_Sig(True, "sig 1: passed"), _Sig(False, "sig 2: modified after signing")], 1),
        ([], 1),
    ],
)
@pytest.mark.parametrize("as_json", [False, True])
def test_verify(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                monkeypatch: pytest.MonkeyPatch, sigs, rc, as_json) -> None:
    import types

    from casesignd.ops import devpki
    from casesignd.verify import validate as verify

    seen: dict = {}

    def verify_file(path, options):
        seen.update(path=path, options=options)
        return _Report(sigs)

    fake = types.ModuleType("casesignd.verify.validate")
    fake.verify_file = verify_file  # type: ignore[attr-defined]
    fake.VerifyOptions = verify.VerifyOptions  # type: ignore[attr-defined]
    fake.read_trust_roots = verify.read_trust_roots  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "casesignd.verify.validate", fake)
    monkeypatch.chdir(tmp_path)  # no casesignd-state/config.toml here
    monkeypatch.delenv("CASESIGND_CONFIG", raising=False)
    pdf = tmp_path / "a.pdf"
    pdf.write_bytes(b"%PDF-1.7")
    ca = devpki.make_ca(kind="ec")
    (tmp_path / "ca.pem").write_bytes(devpki.cert_pem(ca.cert))
    args = ["verify", str(pdf), "--trust", str(tmp_path / "ca.pem"), "--fetch", "never"]
    assert cli.main(args + (["--json"] if as_json else [])) == rc
    out = capsys.readouterr().out
    if as_json:
        assert json.loads(out) == {"signatures": [s.text for s in sigs], "passed": rc == 0}
    else:
        assert out == ("".join(s.text + "\n" for s in sigs) if sigs else f"{pdf}: no signatures\n")
    assert seen["path"] == pdf and seen["options"].fetch == "never"
    from cryptography.hazmat.primitives.serialization import Encoding

    assert seen["options"].trust_roots == (ca.cert.public_bytes(Encoding.DER),)


def test_verify_refuses_a_bad_trust_file(tmp_path: Path, capsys) -> None:
    (tmp_path / "a.pdf").write_bytes(b"%PDF-1.7")
    (tmp_path / "ca.pem").write_text("not a certificate")
    assert cli.main(["verify", str(tmp_path / "a.pdf"), "--trust", str(tmp_path / "ca.pem")]) == 2
    assert "no PEM certificate" in capsys.readouterr().err
    assert cli.main(["verify", str(tmp_path / "missing.pdf")]) == 2


def test_serve_hands_over_config_and_listen(monkeypatch: pytest.MonkeyPatch,
                                             tmp_path: Path) -> None:
    import types

    import casesignd.daemon

    calls: list = []
    fake = types.ModuleType("casesignd.daemon.server")
    fake.serve = lambda config_path, listen, node: calls.append((config_path, listen, node)) or 0  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "casesignd.daemon.server", fake)
    # The package's attribute too: another test may have imported the real module.
    monkeypatch.setattr(casesignd.daemon, "server", fake, raising=False)
    monkeypatch.delenv("CASESIGND_CONFIG", raising=False)
    assert cli.main(["serve"]) == 0
    assert cli.main(["serve", "--config", str(tmp_path / "c.toml"), "--listen", "127.0.0.1:1",
                     "--node", "n2"]) == 0
    monkeypatch.setenv("CASESIGND_CONFIG", "/etc/casesignd/config.toml")
    assert cli.main(["serve"]) == 0
    assert calls == [("casesignd-state/config.toml", None, None),
                     (str(tmp_path / "c.toml"), "127.0.0.1:1", "n2"),
                     ("/etc/casesignd/config.toml", None, None)]
