"""The documents hold together: every relative link of the README and of ``docs/``
reaches a file, and a heading there when it names one (as GitHub makes heading
anchors), and the layout in ``docs/design.md`` names exactly the modules there are."""

from __future__ import annotations

import re
import sys
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# [text](target) and ![alt](target), the target up to its closing parenthesis or a title.
_LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")

sys.path.insert(0, str(ROOT / "scripts"))
import layout_tree  # noqa: E402


def outside_code(text: str) -> str:
    """The text without fenced code blocks and inline code spans (pure)."""
    kept, fenced = [], False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if not fenced:
            kept.append(re.sub(r"`[^`]*`", "", line))
    return "\n".join(kept)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading's text: lower case, punctuation dropped (but ``-``
    and ``_``), each space a hyphen (pure)."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip())
    text = re.sub(r"[^\w\- ]", "", text.lower())
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every heading anchor of a markdown file, repeats numbered as GitHub numbers them."""
    seen: Counter[str] = Counter()
    found = set()
    fenced = False
    for line in path.read_text().splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
        heading = re.match(r"#{1,6} (.+?)\s*#*$", line)
        if heading and not fenced:
            base = slug(heading.group(1))
            found.add(base if not seen[base] else f"{base}-{seen[base]}")
            seen[base] += 1
    return found


def links(path: Path) -> list[str]:
    """The relative link targets of a markdown file, outside code."""
    return [t for t in _LINK.findall(outside_code(path.read_text()))
            if not re.match(r"[a-z][a-z0-9+.-]*:", t)]


@pytest.mark.parametrize(("heading", "anchor"), [
    ("Levels: signatures that outlive their certificates",
     "levels-signatures-that-outlive-their-certificates"),
    ("Service identity: `DynamicUser=yes`", "service-identity-dynamicuseryes"),
    ("What `invoice-v4` prints", "what-invoice-v4-prints"),
    ("Tenants' invoices", "tenants-invoices"),
    ("Jobs and their clocks (histograms, seconds)", "jobs-and-their-clocks-histograms-seconds"),
    ("Before the first job: `casesignd check`", "before-the-first-job-casesignd-check"),
])
def test_a_heading_gets_githubs_anchor(heading: str, anchor: str) -> None:
    assert slug(heading) == anchor


def test_repeated_headings_are_numbered(tmp_path: Path) -> None:
    doc = tmp_path / "a.md"
    doc.write_text("# Tests\n\n```sh\n# not a heading\n```\n\n## Tests\n")
    assert anchors(doc) == {"tests", "tests-1"}


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_relative_link_reaches_its_file_and_heading(document: Path) -> None:
    broken = []
    for target in links(document):
        file_part, _, anchor = target.partition("#")
        reached = (document.parent / file_part).resolve() if file_part else document
        if not reached.exists():
            broken.append(f"{target}: no file {reached.relative_to(ROOT)}")
        elif anchor and reached.suffix == ".md" and anchor not in anchors(reached):
            broken.append(f"{target}: no heading #{anchor} in {reached.relative_to(ROOT)}")
    assert not broken, broken


def test_the_documents_link_to_each_other() -> None:
    readme = links(ROOT / "README.md")
    for name in ("docs/api.md", "docs/operating.md", "docs/signing.md", "docs/design.md"):
        assert name in readme, name


def test_the_layout_names_every_module_and_no_other() -> None:
    written = layout_tree.between_markers((ROOT / "docs/design.md").read_text())
    listed, existing = layout_tree.listed_modules(written), layout_tree.existing_modules()
    assert listed == existing, (
        f"missing from docs/design.md: {sorted(existing - listed)}; "
        f"gone: {sorted(listed - existing)}; run scripts/layout_tree.py --write docs/design.md")
