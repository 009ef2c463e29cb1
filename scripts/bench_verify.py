"""casesignd verify beside plain pyHanko, in one run, on the corpus the tests build
(tests/helpers_sigcorpus.py: pyHanko, casesignd and hand-built signatures, PKCS#7 and
SHA-1, hybrid-reference files, form fills under FieldMDP, DSS and VRI updates, shadow
attacks and overlays, ByteRange tricks, a corrupt CMS, a damaged DSS).

``scripts/bench verify``: per file, the verdict each file should get, casesignd's
(``verify_file``, the test CA as anchor, offline) and plain pyHanko's
(``validate_pdf_signature`` with its default diff policy, its tolerant reader, the
same anchor, no fetching), with each one's CPU time; then how often each agrees
with the expected verdict on integrity (intact and valid) and on modification.

``scripts/bench verify --hostile``: a daemon with two tenants; one sends a burst of
many-signature and large-/Contents verifications, and the other's verify and kiosk
latencies are measured idle and during the burst.

A table, then one JSON object of the figures as the last line.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from cryptography.hazmat.primitives.serialization import Encoding  # noqa: E402

from casesignd.core.errors import CasesignError  # noqa: E402
from casesignd.verify.validate import VerifyOptions, verify_file  # noqa: E402
from tests.helpers_pki import make_pki, reportlab_pdf  # noqa: E402
from tests.helpers_sigcorpus import Expect, build_corpus, large_contents, many_signatures  # noqa: E402


def percentile(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))] if s else float("nan")


def ours(path: Path, options: VerifyOptions) -> tuple[dict[str, Any], float]:
    t = time.process_time()
    try:
        sig = verify_file(path, options).to_json()["signatures"][0]  # type: ignore[index]
        got = {k: sig[k] for k in ("intact", "valid", "modification", "indication",
                                   "sub_indication")}
    except CasesignError as e:
        got = {"intact": None, "valid": None, "modification": None, "indication": e.code,
               "sub_indication": e.reason}
    return got, time.process_time() - t


def plain_pyhanko(path: Path, roots: list[Any]) -> tuple[dict[str, Any], float]:
    """pyHanko as its documentation shows it, on the first signature."""
    from pyhanko.pdf_utils.reader import PdfFileReader
    from pyhanko.sign.diff_analysis import DEFAULT_DIFF_POLICY
    from pyhanko.sign.validation import validate_pdf_signature
    from pyhanko_certvalidator import ValidationContext

    t = time.process_time()
    logging.disable(logging.CRITICAL)  # pyHanko logs its findings with tracebacks
    try:
        with open(path, "rb") as f:
            sig = PdfFileReader(f, strict=False).embedded_signatures[0]
            st = validate_pdf_signature(sig, ValidationContext(trust_roots=roots, allow_fetching=False),
                                        diff_policy=DEFAULT_DIFF_POLICY)
        level = st.modification_level
        mod = ("other" if level is None or st.docmdp_ok is False
               else {"NONE": "none", "LTA_UPDATES": "lta_updates", "FORM_FILLING": "form_filling",
                     "ANNOTATIONS": "annotations"}.get(level.name, "other"))
        got = {"intact": st.intact, "valid": st.valid, "modification": mod,
               "indication": "TOTAL-PASSED" if st.bottom_line else "TOTAL-FAILED"}
    except Exception as e:  # noqa: BLE001 - pyHanko's own answer: an exception
        got = {"intact": None, "valid": None, "modification": None,
               "indication": f"exception:{type(e).__name__}"}
    finally:
        logging.disable(logging.NOTSET)
    return got, time.process_time() - t


def agrees(got: dict[str, Any], want: Expect) -> tuple[bool, bool]:
    integrity = (got["intact"], got["valid"]) == (want.intact, want.valid)
    return integrity, got["modification"] == want.modification


def _pki(work: Path) -> Any:
    (work / "pki").mkdir(parents=True, exist_ok=True)
    return make_pki(work / "pki")


def corpus_run(work: Path) -> dict[str, Any]:
    pki = _pki(work)
    corpus = build_corpus(pki, work / "corpus")
    options = VerifyOptions((pki.ca.cert.public_bytes(Encoding.DER),), "never")
    from asn1crypto import x509 as ax509

    roots = [ax509.Certificate.load(pki.ca.cert.public_bytes(Encoding.DER))]
    for path, _ in corpus.values():  # warm both: imports, caches
        ours(path, options), plain_pyhanko(path, roots)
        break
    rows = []
    for name, (path, want) in corpus.items():
        mine, t_mine = ours(path, options)
        theirs, t_theirs = plain_pyhanko(path, roots)
        rows.append({"file": name, "expected": _word(want.__dict__), "casesignd": _word(mine),
                     "casesignd_ms": round(t_mine * 1000, 1),
                     "casesignd_agrees": agrees(mine, want),
                     "casesignd_indication_agrees": (mine["indication"], mine["sub_indication"])
                     == (want.indication, want.sub_indication),
                     "pyhanko": _word(theirs), "pyhanko_ms": round(t_theirs * 1000, 1),
                     "pyhanko_agrees": agrees(theirs, want)})
    return {"rows": rows, "files": len(rows),
            "casesignd": _tally(rows, "casesignd_agrees"), "pyhanko": _tally(rows, "pyhanko_agrees"),
            "casesignd_indication": sum(r["casesignd_indication_agrees"] for r in rows)}


def _word(v: dict[str, Any]) -> str:
    flag = {True: "y", False: "n", None: "-"}
    return (f"{flag[v['intact']]}{flag[v['valid']]} {v['modification'] or '-'} "
            f"{v['indication']}" + (f"/{v['sub_indication']}" if v.get("sub_indication") else ""))


def _tally(rows: list[dict[str, Any]], key: str) -> dict[str, int]:
    return {"integrity": sum(r[key][0] for r in rows), "modification": sum(r[key][1] for r in rows)}


def print_corpus(result: dict[str, Any]) -> None:
    print("verify: casesignd beside plain pyHanko on the test corpus (anchor: the test CA, offline)")
    print("(verdict: intact valid, modification, indication; '-' unknown; ms is CPU per file)")
    head = f"{'file':24} {'expected':44} {'casesignd':44} {'ms':>7}  {'pyHanko':44} {'ms':>7}"
    print(head)
    print("-" * len(head))
    for r in result["rows"]:
        mark = "" if all(r["casesignd_agrees"]) and r["casesignd_indication_agrees"] else " *"
        print(f"{r['file']:24} {r['expected']:44} {r['casesignd'] + mark:44} "
              f"{r['casesignd_ms']:7.1f}  {r['pyhanko']:44} {r['pyhanko_ms']:7.1f}")
    n = result["files"]
    for who in ("casesignd", "pyhanko"):
        t = result[who]
        print(f"{who:10} agrees on integrity {t['integrity']}/{n}, on modification "
              f"{t['modification']}/{n}")
    print(f"casesignd's indication and sub-indication as expected: "
          f"{result['casesignd_indication']}/{n}")


# --- --hostile -----------------------------------------------------------------------


OTHER = "csd_bench-verify-other-tenant-0123456789abcdef"


def hostile_run(work: Path, burst_n: int, copies: int) -> dict[str, Any]:
    from tests.daemon import Daemon, multipart, to_toml
    from tests.helpers_sigcorpus import sign

    pki = _pki(work)
    base = reportlab_pdf(work / "base.pdf")
    signed = sign(base, work / "signed.pdf", pki).read_bytes()
    many = many_signatures(work / "signed.pdf", work / "many.pdf", copies).read_bytes()
    large = large_contents(work / "signed.pdf", work / "large.pdf", 1_500_000).read_bytes()
    d = Daemon(work / "state", {"validation": {"fetch": "never"}, "logging": {"level": "warning"},
                                "kiosk": {"max_document_bytes": 4 * 1024 * 1024,
                                          "deadline_ms": 120000}},
               # This checkout's casesignd, whatever the virtualenv has installed.
               env={"PYTHONPATH": str(ROOT)})
    d.config["tenants"].append({"name": "other",
                                "token_sha256": hashlib.sha256(OTHER.encode()).hexdigest()})
    d.config_path.write_text(to_toml(d.config))
    d.start()
    kiosk_body, kiosk_type = multipart({"case_id": "B", "signers": []}, base.read_bytes())

    def theirs(kind: str) -> tuple[float, int]:
        t = time.perf_counter()
        if kind == "verify":
            r = d.request("POST", "/v1/verify", raw=signed, auth=OTHER, timeout_s=300,
                          headers={"Content-Type": "application/pdf"})
        else:
            r = d.request("POST", "/v1/sign", raw=kiosk_body, auth=OTHER, timeout_s=300,
                          headers={"Content-Type": kiosk_type})
        return (time.perf_counter() - t) * 1000, r.status

    try:
        idle = {k: [theirs(k) for _ in range(5)] for k in ("verify", "kiosk")}
        stop = threading.Event()
        statuses: list[int] = []

        def attacker(doc: bytes) -> None:
            while not stop.is_set():
                r = d.request("POST", "/v1/verify", raw=doc, timeout_s=300,
                              headers={"Content-Type": "application/pdf"})
                statuses.append(r.status)
                if r.status == 503:
                    time.sleep(0.05)

        with ThreadPoolExecutor(burst_n) as pool:
            for i in range(burst_n):
                pool.submit(attacker, large if i % 4 == 3 else many)
            time.sleep(1.0)
            during = {k: [theirs(k) for _ in range(5)] for k in ("verify", "kiosk")}
            stop.set()
    finally:
        d.stop()
    rows = []
    for phase, data in (("idle", idle), ("burst", during)):
        for kind, samples in data.items():
            ms = [m for m, _ in samples]
            rows.append({"phase": phase, "request": kind, "p50_ms": round(percentile(ms, 0.5), 1),
                         "max_ms": round(max(ms), 1),
                         "not_200": sum(1 for _, s in samples if s != 200)})
    return {"rows": rows, "burst_threads": burst_n, "copies": copies,
            "burst_answers": {str(s): statuses.count(s) for s in sorted(set(statuses))}}


def print_hostile(result: dict[str, Any]) -> None:
    print(f"verify --hostile: the other tenant's latencies while one tenant keeps "
          f"{result['burst_threads']} verifications of {result['copies']}-signature and "
          "large-/Contents documents in flight")
    print(f"{'phase':8} {'request':8} {'p50 ms':>9} {'max ms':>9} {'not 200':>8}")
    for r in result["rows"]:
        print(f"{r['phase']:8} {r['request']:8} {r['p50_ms']:9.1f} {r['max_ms']:9.1f} {r['not_200']:8}")
    print(f"the burst's own answers by status: {result['burst_answers']}")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="scripts/bench verify", description=__doc__.splitlines()[0])
    p.add_argument("--hostile", action="store_true",
                   help="the other tenant's latencies during one tenant's verify burst")
    p.add_argument("--burst", type=int, default=8, help="--hostile: the burst's requests in flight")
    p.add_argument("--copies", type=int, default=90,
                   help="--hostile: signature copies per many-signature document")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-verify-") as tmp:
        if args.hostile:
            result = hostile_run(Path(tmp), args.burst, args.copies)
            print_hostile(result)
            print(json.dumps({"bench": "verify-hostile", **result}))
        else:
            result = corpus_run(Path(tmp))
            print_corpus(result)
            print(json.dumps({"bench": "verify", **result}))


if __name__ == "__main__":
    main()
