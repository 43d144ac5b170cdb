"""No internal shorthand reaches users: help text, docs, comments and messages name the
reference code (flow_grpo, DanceGRPO, MixGRPO, verl-omni, UniRL) instead of our abbreviations,
and cite no issue numbers of our tracker."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SHORTHAND = re.compile(r"FG-up|FG-fast|\b(?:DG|MG|VO|UR)\b|\bissue \d+\b|\bseed 000\b")
SCANNED = ["README.md", "docs", "genalign", "tests", "benchmarks", "scripts", ".ci"]
SUFFIXES = {".py", ".md", ".yaml", ".yml", ".sh", ""}


def scanned_files():
    for entry in SCANNED:
        path = ROOT / entry
        files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
        for file in files:
            if file.suffix in SUFFIXES and file.resolve() != Path(__file__).resolve():
                yield file


def test_no_internal_shorthand_in_anything_users_read():
    hits = []
    for file in scanned_files():
        try:
            text = file.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        for number, line in enumerate(text.splitlines(), start=1):
            if SHORTHAND.search(line):
                hits.append(f"{file.relative_to(ROOT)}:{number}: {line.strip()[:100]}")
    assert hits == [], "write out what the shorthand stands for:\n" + "\n".join(hits)
