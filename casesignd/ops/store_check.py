"""``casesignd store check``: a store, its files and its audit chain, held against
each other, for SQLite and PostgreSQL alike (:mod:`.snapshot`).

- the audit chain verifies, and PostgreSQL's head (``audit_head``) is its last event;
- the jobs per state the store keeps (SQLite's trigger counters, PostgreSQL's
  ``job_counts``) are the jobs it holds;
- every artifact the store names (a record, or a recorded signature not yet finished)
  has its bytes, in the store or as a file, with the recorded size and SHA-256; every
  file under ``artifacts/`` is named by the store; a succeeded job's result and a
  renewal name recorded artifacts;
- the objects that jobs which may still run name (queued, running, waiting for a
  retry, or failed and so retryable) are there, with their digests;
- with storage encryption, every sealed file and value reads back whole under its data
  key (``sealed_unreadable`` otherwise: altered, cut, swapped, or its key gone), and
  the configured keys include every key id the store's data keys are wrapped under
  (``storage_key_missing``).

What retention or an erasure removed is no problem: a succeeded job whose artifact
went says so (``removed_at`` in its result), and an object a removal recorded in the
audit chain may still be named by a job (:func:`removed_object`). Something is wrong
only when what is missing was removed by nothing, or a file no longer matches its
digest.

Everything is streamed: the records and the files are two sorted streams merged side
by side (:func:`.files.side_by_side`), so memory does not grow with the store. On a
store in use the rows are one snapshot; a file that has no record in it is looked up
again before it is called an orphan, since a daemon writes an artifact's file before
the commit that records it.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import msgspec

from casesignd.core import audit
from casesignd.core.errors import CasesignError
from casesignd.core.hashing import object_ref_digest, sha256_hex
from casesignd.core.keyring import NO_KEYS, Keyring, artifact_owner, object_owner
from casesignd.files.artifacts import artifact_path
from casesignd.files.objects import ObjectStore
from casesignd.ops.state_files import (
    ARTIFACTS,
    OBJECTS,
    PlainDigests,
    Strays,
    artifact_files,
    keys_needed,
    side_by_side,
)
from casesignd.store.snapshot import Row, Snapshot

# Problems a report lists at most; the rest are counted.
PROBLEMS_SHOWN = 1000

Ids = dict[str, str | int]


@dataclass(frozen=True)
class Problem:
    """One thing that is wrong: a stable ``kind``, words for people, and what it is about."""

    kind: str
    message: str
    about: Ids = field(default_factory=dict)

    def to_json(self) -> dict[str, str | int]:
        return {"kind": self.kind, "message": self.message, **self.about}


@dataclass
class CheckReport:
    """What ``store check`` found."""

    store: str
    state_dir: str
    counted: dict[str, int] = field(default_factory=dict)
    head_seq: int = 0
    head_hash: str = audit.GENESIS
    problems: list[Problem] = field(default_factory=list)
    problems_total: int = 0

    @property
    def ok(self) -> bool:
        return self.problems_total == 0

    def add(self, kind: str, message: str, **about: str | int) -> None:
        self.problems_total += 1
        if len(self.problems) < PROBLEMS_SHOWN:
            self.problems.append(Problem(kind, message, about))

    def count(self, what: str, n: int = 1) -> None:
        self.counted[what] = self.counted.get(what, 0) + n

    def to_json(self) -> dict[str, object]:
        return {"ok": self.ok, "store": self.store, "state_dir": self.state_dir,
                "counted": self.counted,
                "chain_head": {"seq": self.head_seq, "hash": self.head_hash},
                "problems": [p.to_json() for p in self.problems],
                "problems_total": self.problems_total}

    def lines(self) -> list[str]:
        """The report for people."""
        c = self.counted.get
        out = [f"store check: {self.store}, files under {self.state_dir}",
               f"  audit chain: {c('events', 0)} events, head seq {self.head_seq}",
               f"  jobs: {c('jobs', 0)}",
               f"  artifacts named by the store: {c('artifact_records', 0)} (kept in it: "
               f"{c('inline_artifacts', 0)}); files under artifacts/: {c('artifact_files', 0)}",
               f"  objects named by jobs that may still run: {c('objects', 0)}"]
        if self.ok:
            return [*out, "all well"]
        out.append(f"{self.problems_total} problem{'s' if self.problems_total != 1 else ''}:")
        out += [f"  {p.kind}: {p.message}" for p in self.problems]
        if self.problems_total > len(self.problems):
            out.append(f"  ... and {self.problems_total - len(self.problems)} more")
        return out


def check_store(snap: Snapshot, state_dir: Path, keyring: Keyring = NO_KEYS) -> CheckReport:
    """Check the store ``snap`` reads against its files under ``state_dir``, sealed
    ones read with ``keyring`` (the configured storage keys). Blocking."""
    report = CheckReport(snap.name, str(state_dir))
    digests = PlainDigests(snap, keyring)
    held, missing = keys_needed(snap, keyring)
    for key_id in missing:
        report.add("storage_key_missing",
                   f"{held[key_id]} data key(s) are wrapped under key id {key_id!r}, which "
                   "the configuration does not name (storage.key_id, [[storage.old_keys]])",
                   key_id=key_id)
    _check_chain(snap, report)
    _check_counts(snap, report)
    _check_artifacts(snap, state_dir / ARTIFACTS, report, digests)
    _check_inputs(snap, state_dir, report, digests)
    if digests.sealed:
        report.count("sealed_files", digests.sealed)
    return report


def _unreadable(report: CheckReport, what: str, e: CasesignError, **about: str | int) -> None:
    report.add("sealed_unreadable", f"{what}: {e.message}", **about)


def _check_chain(snap: Snapshot, report: CheckReport) -> None:
    last: list[Row] = []

    def tracked() -> Iterator[Row]:
        for row in snap.stream("events"):
            report.count("events")
            last[:] = [row]
            yield row

    verified = audit.verify_rows(tracked())
    if not verified.ok:
        bad = verified.first_bad or {}
        report.add("chain_broken", f"event seq={bad.get('seq')} (event_id={bad.get('event_id')}, "
                   f"job_id={bad.get('job_id')}): {bad.get('reason')}",
                   seq=bad.get("seq", 0), event_id=bad.get("event_id", ""),
                   job_id=bad.get("job_id", ""))
        return
    seq, hsh = (last[0]["seq"], last[0]["hash"]) if last else (0, audit.GENESIS)
    report.head_seq, report.head_hash = seq, hsh
    head = snap.one("chain_head") or {"seq": 0, "hash": audit.GENESIS}
    if (head["seq"], head["hash"]) != (seq, hsh):
        report.add("chain_head_mismatch",
                   f"the chain's head is seq {head['seq']} ({head['hash'][:12]}…); its last "
                   f"event is seq {seq} ({hsh[:12]}…): the next event would not chain on",
                   seq=int(head["seq"]))


def _check_counts(snap: Snapshot, report: CheckReport) -> None:
    held = {str(r["state"]): int(r["n"]) for r in snap.stream("job_states")}
    report.count("jobs", sum(held.values()))
    counted = {f"state:{state}": n for state, n in held.items()}
    counted["waiting"] = held.get("queued", 0) + held.get("retry_wait", 0)
    kept = {str(r["name"]): int(r["value"]) for r in snap.stream("kept_counts")}
    names = set(kept) | {name for name, n in counted.items() if n and name.startswith("state:")}
    for name in sorted(names):
        if kept.get(name) != counted.get(name, 0):
            report.add("counter_mismatch",
                       f"{name}: the store keeps {kept.get(name, 'no count')}, "
                       f"its jobs count {counted.get(name, 0)}", counter=name)


def _check_artifacts(snap: Snapshot, root: Path, report: CheckReport,
                     digests: PlainDigests) -> None:
    strays = Strays()
    for artifact_id, rec, path in side_by_side(snap.stream("artifact_records"),
                                               artifact_files(root, strays)):
        if path is not None:
            report.count("artifact_files")
        if rec is None:
            assert path is not None
            if snap.again("artifact_named", artifact_id=artifact_id) is None:
                report.add("orphan_file", f"{path}: no record names {artifact_id}",
                           artifact_id=artifact_id, path=str(path))
            continue
        report.count("artifact_records")
        want = (str(rec["sha256"]), int(rec["size"]))
        if rec["inline"]:
            report.count("inline_artifacts")
            row = snap.one("inline_data", artifact_id=artifact_id)
            try:
                data = digests.inline(artifact_id, row) if row else b""
            except CasesignError as e:
                _unreadable(report, f"{artifact_id} (in the store)", e, artifact_id=artifact_id)
                continue
            got = (sha256_hex(data), len(data))
            if got != want:
                report.add("artifact_data_changed", _differs(f"{artifact_id} (in the store)", got, want),
                           artifact_id=artifact_id)
        elif path is None:
            report.add("artifact_file_missing",
                       f"{artifact_id}: no file at {artifact_path(root, artifact_id)}",
                       artifact_id=artifact_id, path=str(artifact_path(root, artifact_id)))
        else:
            try:
                got = digests(path, artifact_owner(artifact_id))
            except CasesignError as e:
                _unreadable(report, str(path), e, artifact_id=artifact_id, path=str(path))
                continue
            if got != want:
                report.add("artifact_file_changed", _differs(str(path), got, want),
                           artifact_id=artifact_id, path=str(path))
    for stray in strays.paths:
        report.add("orphan_file", f"{stray}: not an artifact's file", path=str(stray))
    report.problems_total += strays.count - len(strays.paths)  # counted, not listed
    for row in snap.stream("results_unrecorded"):
        report.add("result_artifact_missing",
                   f"job {row['job_id']} succeeded with artifact {row['artifact_id']}, "
                   "which has no record", job_id=row["job_id"], artifact_id=row["artifact_id"])
    for row in snap.stream("renewals_unrecorded"):
        report.add("renewal_artifact_missing",
                   f"artifact {row['artifact_id']} is marked renewed by {row['renewed_by']}, "
                   "which has no record", artifact_id=row["artifact_id"])


def _differs(what: str, got: tuple[str, int], want: tuple[str, int]) -> str:
    return (f"{what} is {got[1]} bytes, SHA-256 {got[0]}; its record says {want[1]} bytes, "
            f"SHA-256 {want[0]}")


def removed_object(snap: Snapshot, tenant: str, case_id: str | None, sha256: str) -> bool:
    """Whether retention or an erasure removed the object ``sha256`` of a case (and it
    was not uploaded again since): a job may still name it, and that job is sound."""
    return case_id is not None and snap.one(
        "object_removed", tenant=tenant, case_id=case_id, sha256=sha256) is not None


def _check_inputs(snap: Snapshot, state_dir: Path, report: CheckReport,
                  digests: PlainDigests) -> None:
    objects = ObjectStore(state_dir / OBJECTS)
    for job in snap.stream("jobs_with_inputs"):
        job_id, tenant, case_id = str(job["job_id"]), str(job["tenant"]), job["case_id"]
        body = msgspec.json.decode(job["input"])
        if job["kind"] == "extend_signature":
            # An artifact's record goes only by a removal the chain records, and a
            # record whose bytes are lost is named above; so an extend_signature of an
            # artifact with no record names one that never existed or was removed:
            # the job's own failure (artifact_not_found when it runs), not the store's.
            continue
        for i, item in enumerate(body.get("items", [])):
            ref = str(item.get("object_ref", ""))
            sha = object_ref_digest(ref)
            if sha is None:
                continue  # a source's path: read from the source when the job runs
            report.count("objects")
            path = objects.path(tenant, case_id or "", sha)
            where = f"job {job_id} ({job['state']}) items[{i}]"
            if path is None:
                if removed_object(snap, tenant, case_id, sha):
                    continue
                report.add("object_missing", f"{where}: object sha256:{sha} of case "
                           f"{case_id} is not in {state_dir / OBJECTS}", job_id=job_id,
                           sha256=sha)
                continue
            try:
                got = digests(path, object_owner(sha))
            except CasesignError as e:
                _unreadable(report, f"{where}: {path}", e, job_id=job_id, sha256=sha)
                continue
            want = (sha, int(item.get("size", got[1])))
            if got != want:
                report.add("object_changed", f"{where}: " + _differs(str(path), got, want),
                           job_id=job_id, sha256=sha)
