"""The repository's map stays whole: every doc a file cites exists, with the section it names.

Checked over README.md, docs/, genalign/, tests/, benchmarks/ and scripts/:
* relative markdown links (`[text](path)`, `![alt](path)`, `path#anchor`) in README.md and
  docs/ resolve to a file, and an anchor into a markdown page to one of its headings;
* a `docs/<page>.md` cited anywhere exists;
* a section cited as `docs/<page>.md §2.5` (or `§2.5, §2.8`, `§2.4-2.9`) is a numbered heading
  of that page (`## 2.`, `### 2.5 ...`);
* nothing cites the notes the repository does not carry (ALGORITHMS.md / DESIGN.md sections).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCANNED_DIRS = ("docs", "genalign", "tests", "benchmarks", "scripts")
SUFFIXES = {".md", ".py", ".yaml", ".yml", ".sh", ".txt", ".toml"}

LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
DOC_PATH = re.compile(r"(?<![\w/.-])(docs/[\w./-]+?\.md)\b")
SECTION_CITE = re.compile(r"(docs/[\w./-]+?\.md) (§ ?\d+(?:\.\d+)*(?:(?:, ?| ?[-–] ?)§? ?\d+(?:\.\d+)*)*)")
SECTION_NUMBER = re.compile(r"\d+(?:\.\d+)*")
HEADING = re.compile(r"^#{1,6} +(.+?) *$", re.M)
FOREIGN_NOTES = re.compile(r"ALGORITHMS(?:\.md)? ?§|DESIGN(?:\.md\b| ?§)|\bseed 000\b")


def _text_files() -> list[Path]:
    files = [ROOT / "README.md"]
    for folder in SCANNED_DIRS:
        files += [p for p in sorted((ROOT / folder).rglob("*")) if p.is_file() and p.suffix in SUFFIXES]
    return [p for p in files if p != Path(__file__).resolve()]


def _markdown_pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def heading_slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def section_numbers(page: Path) -> set[str]:
    """ "2.5" for a heading "### 2.5 The clipped surrogate", "2" for "## 2. Flow-GRPO"."""
    numbers = set()
    for heading in HEADING.findall(page.read_text(encoding="utf-8")):
        match = re.match(r"(\d+(?:\.\d+)*)\.?(?:\s|$)", heading)
        if match:
            numbers.add(match.group(1))
    return numbers


def _rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


def test_heading_slug_follows_github():
    assert (
        heading_slug("2.5 The clipped surrogate, the KL and the update")
        == "25-the-clipped-surrogate-the-kl-and-the-update"
    )
    assert heading_slug("Video families (Wan 2.1)") == "video-families-wan-21"
    assert heading_slug("`genalign eval`: re-run") == "genalign-eval-re-run"


def test_section_citations_are_parsed_with_their_lists():
    cites = SECTION_CITE.findall(
        "see docs/algorithms.md §2.5, §2.8 and docs/architecture.md §2; docs/algorithms.md §2.4-2.9"
    )
    assert [(page, SECTION_NUMBER.findall(sections)) for page, sections in cites] == [
        ("docs/algorithms.md", ["2.5", "2.8"]),
        ("docs/architecture.md", ["2"]),
        ("docs/algorithms.md", ["2.4", "2.9"]),
    ]


@pytest.mark.parametrize("page", _markdown_pages(), ids=_rel)
def test_relative_markdown_links_resolve(page: Path):
    problems = []
    for target in LINK.findall(page.read_text(encoding="utf-8")):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        if not linked.exists():
            problems.append(f"{target}: no file {linked}")
        elif anchor and linked.suffix == ".md":
            slugs = {heading_slug(h) for h in HEADING.findall(linked.read_text(encoding="utf-8"))}
            if anchor not in slugs:
                problems.append(f"{target}: {_rel(linked)} has no heading with anchor #{anchor}")
    assert not problems, f"{_rel(page)}:\n  " + "\n  ".join(problems)


def test_cited_doc_pages_and_sections_exist():
    problems = []
    for path in _text_files():
        text = path.read_text(encoding="utf-8", errors="replace")
        for cited in set(DOC_PATH.findall(text)):
            if not (ROOT / cited).is_file():
                problems.append(f"{_rel(path)} cites {cited}, which is not in the repository")
        for cited, sections in SECTION_CITE.findall(text):
            if not (ROOT / cited).is_file():
                continue  # reported above
            missing = set(SECTION_NUMBER.findall(sections)) - section_numbers(ROOT / cited)
            if missing:
                problems.append(f"{_rel(path)} cites {cited} §{', §'.join(sorted(missing))}: no such section")
    assert not problems, "\n".join(problems)


def test_nothing_cites_notes_outside_the_repository():
    hits = [
        f"{_rel(path)}:{n}: {line.strip()}"
        for path in _text_files()
        for n, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1)
        if FOREIGN_NOTES.search(line)
    ]
    assert not hits, "cite docs/ instead:\n" + "\n".join(hits)
