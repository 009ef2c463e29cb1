"""``case sign``'s pure parts: the manifest, its derived key, what a refusal's field
names on the command line, and the progress lines."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from casesignd.cli.case_sign import (
    InputFile,
    Progress,
    at_fault,
    build_manifest,
    derived_key,
    human_bytes,
    progress_line,
)
from casesignd.http.openapi import document

HEX = "ab" * 32
FILES = [InputFile("contract", Path("dir/contract.pdf"), HEX, 48213, "application/pdf"),
         InputFile("evidence", Path("photo.heic"), "cd" * 32, 1234, "image/heic")]
SIGNERS = [{"id": "seller-881", "name": "Acme Ltd", "role": "seller"}]


def test_the_manifest_is_a_sign_case_request_of_the_contract() -> None:
    openapi_schema_validator = pytest.importorskip("openapi_schema_validator")
    doc = document()
    m = build_manifest("MKT-1", FILES, SIGNERS, "contract-v1")
    openapi_schema_validator.validate(m, {"$ref": "#/components/schemas/SignCaseJob",
                                          "components": doc["components"]},
                                      cls=openapi_schema_validator.OAS31Validator)
    assert [(i["role"], i["name"], i["object_ref"]) for i in m["items"]] == [
        ("contract", "contract.pdf", f"sha256:{HEX}"), ("evidence", "photo.heic", f"sha256:{'cd' * 32}")]
    assert "policy_version" not in build_manifest("MKT-1", FILES, SIGNERS, None)


def test_the_key_is_the_manifest_s() -> None:
    m = build_manifest("MKT-1", FILES, SIGNERS, None)
    key = derived_key(m)
    assert key == derived_key(build_manifest("MKT-1", list(FILES), [dict(SIGNERS[0])], None))
    assert len(key) <= 255 and key.isascii() and key.isprintable()
    others = [build_manifest("MKT-2", FILES, SIGNERS, None),
              build_manifest("MKT-1", FILES[:1], SIGNERS, None),
              build_manifest("MKT-1", FILES, [], None),
              build_manifest("MKT-1", FILES, SIGNERS, "contract-v2"),
              build_manifest("MKT-1", [FILES[0], InputFile("evidence", Path("renamed.heic"),
                                                           "cd" * 32, 1234, "image/heic")],
                             SIGNERS, None)]
    assert len({key, *map(derived_key, others)}) == 1 + len(others)


@pytest.mark.parametrize(("field", "want"), [
    ("items[0].sha256", "contract contract.pdf"),
    ("items[1].media_type", "evidence photo.heic"),
    ("items[1]", "evidence photo.heic"),
    ("items[7].name", None),
    ("signers[0].id", "--signer seller-881"),
    ("signers", "--signer"),
    ("case_id", "--case"),
    ("policy_version", "--policy"),
    ("items", None),
    (None, None),
])
def test_a_field_names_the_file_or_option(field: str | None, want: str | None) -> None:
    assert at_fault(field, FILES, SIGNERS) == want


@pytest.mark.parametrize(("n", "text"), [(0, "0 B"), (1023, "1023 B"), (1536, "1.5 KiB"),
                                         (12_900_000, "12.3 MiB"), (3 << 30, "3.0 GiB")])
def test_human_bytes(n: int, text: str) -> None:
    assert human_bytes(n) == text


def test_progress_lines_are_throttled_and_only_for_large_files() -> None:
    now = [0.0]
    stream = io.StringIO()
    p = Progress(stream, enabled=True, tty=False, clock=lambda: now[0])
    p.transfer("upload small", 1000)(1000)
    tick = p.transfer("upload big", 4 << 20)
    for done in range(1 << 20, 4 << 20, 1 << 20):
        tick(done)
        now[0] += 0.5
    tick(4 << 20)
    assert stream.getvalue().splitlines() == [
        progress_line("upload big", 1 << 20, 4 << 20), "upload big: 100% 4.0 MiB of 4.0 MiB"]
    assert progress_line("upload big", 1 << 20, 4 << 20) == "upload big:  25% 1.0 MiB of 4.0 MiB"


def test_a_terminal_line_is_rewritten_and_ended_before_an_error() -> None:
    stream = io.StringIO()
    p = Progress(stream, enabled=True, tty=True, clock=lambda: 0.0)
    p.transfer("upload big", 2 << 20)(1 << 20)
    p.close()
    p.job({"job_id": "j1", "state": "queued"})
    p.job({"job_id": "j1", "state": "queued"})
    assert stream.getvalue() == ("\rupload big:  50% 1.0 MiB of 2.0 MiB\x1b[K\n"
                                 "\rjob j1 queued\x1b[K\n")
    off = io.StringIO()
    Progress(off, enabled=False, tty=True).note("nothing")
    assert off.getvalue() == ""
