"""A daemon's node name (``serve --node``): its working files, its sweeps, its leases."""

from __future__ import annotations

from tests.helpers_ops import case_manifest
from tests.helpers_pki import reportlab_pdf


def test_a_node_keeps_to_its_own_working_files_and_names_its_leases(daemon_factory, tmp_path):
    d = daemon_factory(start=False)
    tmp = d.dir / d.config["storage"]["temp_dir"]
    (tmp / "other-node").mkdir(parents=True)
    (tmp / "other-node" / "attempt-of-another-daemon").write_bytes(b"x")
    d.temp_area.mkdir(parents=True, exist_ok=True)
    (d.temp_area / "left-by-a-crash").write_bytes(b"x")
    d.start()
    # Its own leftovers are swept at start; another node's are not its to remove.
    assert not (d.temp_area / "left-by-a-crash").exists()
    assert (tmp / "other-node" / "attempt-of-another-daemon").exists()
    ready = d.request("GET", "/readyz", auth=False).json()
    assert ready["node"] == "test-node"
    metrics = d.request("GET", "/metrics", auth=False).body.decode()
    info = next(line for line in metrics.splitlines() if line.startswith("casesignd_build_info{"))
    assert 'node="test-node"' in info
    contract = reportlab_pdf(tmp_path / "c.pdf").read_bytes()
    body = case_manifest(d, "NODE-1", contract, [("note.txt", "text/plain", b"a note\n")])
    job = d.wait_job(d.submit(body).json()["job_id"])
    assert job["state"] == "ready", job
    claims = [e for e in d.events(job["job_id"]) if e["type"] == "claimed"]
    assert claims and all(e["actor"].startswith("worker:test-node:") for e in claims), claims
    assert list(d.temp_area.iterdir()) == []


def test_a_node_name_that_cannot_be_a_directory_is_refused(daemon_factory):
    d = daemon_factory(start=False)
    d.node = "../escape"
    d.start(wait=False)
    assert d.proc is not None and d.proc.wait(timeout=30) == 2
    assert "--node" in d.logs()
