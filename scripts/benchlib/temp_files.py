"""The temp files of a signing job, plain against sealed, for ``scripts/bench sign``.

Both engines do what a ``sign_case`` attempt does with a contract in its temp area,
after the fetch: check and prepare it into a working file, sign, finish, and publish
the signed document (read, hashed and written to a new file, fsynced).

- ``casesignd-job``: plain temp files, as before sealing: the prepared file is
  finished in place and copied out.
- ``casesignd-sealed``: the contract sealed as the fetch leaves it, and the signed
  document written by the signing process straight into its artifact's file in
  flight, the signature's end held in memory until it is known, then published by
  a hard link (:class:`casesignd.signing.sealed_output.Publication`), as a B-B
  ``sign_case`` job does now: nothing of it passes through the temp area.

The difference between the two rows is the cost of sealing the temp files, less
what the direct publication saves (the copy).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from pathlib import Path

PASSWORD = b"bench-password"
LARGE_BYTES = 10 * 1000 * 1000


def _setup(p12: Path) -> tuple[object, object, object]:
    from casesignd.signing import cms, pades
    from casesignd.signing.keys import load_pkcs12

    signer = load_pkcs12(p12, PASSWORD)
    meta = pades.SignatureMeta(signing_time=dt.datetime.now(dt.UTC), reason="bench")
    return signer, meta, cms.template_for(signer.cert, tuple(signer.chain))


def _cms(prepared: object, signer: object, template: object) -> bytes:
    from casesignd.signing import cms, pipeline

    attrs = cms.build_signed_attrs(prepared.digest, template)  # type: ignore[attr-defined]
    return cms.assemble(template, attrs, pipeline.sign_with(signer, attrs), None)  # type: ignore[arg-type]


def plain_job(src: Path, out_dir: Path, p12: Path, n: int,
              before_each: Callable[[Path], None], clock: Callable[[], float]) -> list[float]:
    from casesignd.files.artifacts import copy_new
    from casesignd.pdf.limits import PdfLimits
    from casesignd.signing import pades, pipeline

    signer, meta, template = _setup(p12)
    times = []
    for i in range(n):
        before_each(src)
        dst, out = out_dir / f"job-{i}.pdf", out_dir / f"job-{i}.out.pdf"
        t = clock()
        _checked, prepared = pipeline.prepare_file(src, dst, limits=PdfLimits(), attachments=[],
                                                   meta=meta, contents_bytes=16384)  # type: ignore[arg-type]
        assert isinstance(prepared, pades.Prepared)
        pades.finalize(prepared, _cms(prepared, signer, template), sync=False)
        copy_new(dst, out)
        times.append(clock() - t)
        dst.unlink()
        out.unlink()
    return times


def sealed_job(src: Path, out_dir: Path, p12: Path, n: int,
               before_each: Callable[[Path], None], clock: Callable[[], float]) -> list[float]:
    from casesignd.core.sealed import SealedPath, SealKey, copy_into
    from casesignd.files.artifacts import ArtifactStore
    from casesignd.pdf.limits import PdfLimits
    from casesignd.signing import pipeline, sealed_output

    signer, meta, template = _setup(p12)
    key = SealKey.generate()
    sealed_src = SealedPath(out_dir / "sealed-src", key)
    with open(src, "rb") as f, sealed_src.create() as w:  # as the fetch leaves it
        copy_into(f, w)
    artifacts = ArtifactStore(out_dir / "artifacts", b"bench-link-secret-0123456789")
    times = []
    try:
        for i in range(n):
            before_each(src)
            dst = SealedPath(out_dir / f"sealed-{i}.pdf", key)  # only the checks' rewrite
            artifact_id = artifacts.artifact_id("bench", f"job:{i}")
            t = clock()
            target = artifacts.in_flight(artifact_id)
            assert target is not None
            with sealed_output.Publication(target) as into:
                _checked, prepared = pipeline.prepare_file(
                    sealed_src, dst, limits=PdfLimits(), attachments=[], meta=meta,  # type: ignore[arg-type]
                    contents_bytes=16384, into=into)
                tail = sealed_output.finish(prepared, _cms(prepared, signer, template))
                written = into.finish(prepared, tail)  # type: ignore[arg-type]
            artifacts.publish_written(target, written)
            times.append(clock() - t)
            artifacts.remove(artifact_id)
    finally:
        sealed_src.unlink()
    return times
