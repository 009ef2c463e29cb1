"""`casesignd check FILE.pdf`: the signing decision offline, as a user runs it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from casesignd.cli import commands as cli
from tests.helpers_corpus import _one_page

LINK = b"<< /Type /Annot /Subtype /Link /Rect [0 0 10 10] /A << /S /URI /URI (%s) >> >>"
POLICIES = """
default_policy = "p1"
[[policies]]
version = "p1"
[[policies]]
version = "inside-only"
allowed_link_schemes = []
"""


@pytest.fixture
def docs(tmp_path: Path) -> dict[str, Path]:
    made = {
        "link": _one_page(page_extra=b"/Annots [6 0 R] ", more=[LINK % b"https://example.org/t"]),
        "unc": _one_page(page_extra=b"/Annots [6 0 R] ", more=[LINK % rb"\\\\host\\share"]),
        "junk": b"junk before the header\n" + _one_page(),
    }
    out = {}
    for name, data in made.items():
        out[name] = tmp_path / f"{name}.pdf"
        out[name].write_bytes(data)
    return out


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(["check", *argv])
    got = capsys.readouterr()
    return code, got.out, got.err


def test_a_link_is_signed_and_counted(docs: dict[str, Path], capsys, monkeypatch,
                                      tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)  # no casesignd-state/config.toml: the built-in policy
    code, out, _ = _run(capsys, str(docs["link"]))
    assert code == 0 and out.strip() == f"{docs['link']}: signed as it is (1 page, 1 external link)"
    code, out, _ = _run(capsys, str(docs["link"]), "--json")
    result = json.loads(out)
    assert code == 0 and result["verdict"] == "sign" and result["external_links"] == 1
    assert "example.org" not in out


def test_a_refusal_says_its_code_reason_and_where(docs: dict[str, Path], capsys, monkeypatch,
                                                  tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    code, out, _ = _run(capsys, str(docs["unc"]))
    assert code == 1
    assert out.startswith(f"{docs['unc']}: refused: active_content: ")
    assert out.rstrip().endswith("(reason link_scheme, object 6)") and "host" not in out
    code, out, _ = _run(capsys, str(docs["unc"]), "--json")
    assert code == 1
    assert {k: v for k, v in json.loads(out).items() if k != "message"} == {
        "verdict": "refuse", "code": "active_content", "reason": "link_scheme",
        "where": {"object": 6}}


def test_a_rewrite_says_why(docs: dict[str, Path], capsys, monkeypatch,
                            tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    code, out, _ = _run(capsys, str(docs["junk"]), "--json")
    result = json.loads(out)
    assert code == 0 and result["verdict"] == "sign_rewritten"
    assert any("before the %PDF- header" in r for r in result["normalize"]["reasons"])
    assert result["normalize"]["signed_sha256"] != result["received_sha256"]
    assert list(tmp_path.glob("casesignd-check-*")) == []


def test_the_policy_comes_from_the_config(docs: dict[str, Path], capsys,
                                          tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text(POLICIES)
    assert _run(capsys, str(docs["link"]), "--config", str(config))[0] == 0
    code, out, _ = _run(capsys, str(docs["link"]), "--config", str(config),
                        "--policy", "inside-only")
    assert code == 1 and "reason link_scheme" in out
    code, _, err = _run(capsys, str(docs["link"]), "--config", str(config), "--policy", "nope")
    assert code == 2 and "no policy 'nope'" in err and "p1, inside-only" in err
    code, _, err = _run(capsys, str(tmp_path / "missing.pdf"))
    assert code == 2 and "no such file" in err
