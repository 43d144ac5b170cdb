"""Build the DrawBench prompt files from `drawbench.csv` (deterministic, offline).

`drawbench.csv` is DrawBench as its authors publish it (Imagen, Saharia et al. 2022: the
"DrawBench Prompts" sheet, 200 prompts in 11 categories), as a stored copy of it reads
(README.md says where it came from). This script writes:

- `prompts.jsonl`: the 200 prompts in the sheet's order, each `{"prompt", "category"}`: the
  `drawbench` benchmark's manifest (the category travels to the results as metadata, so the
  table can be broken down by it);
- `train_192.txt` and `test_8.txt`: the split the project's contract names for training on
  DrawBench prompts (`data.manifest=datasets/drawbench/train_192.txt`): 8 prompts drawn with a
  fixed seed, at most one per category, are held out for a run's own evaluation; the other 192,
  in the sheet's order, are the training prompts. (A run trained on `train_192.txt` has seen 192
  of the benchmark's 200 prompts: its DrawBench numbers are not held-out numbers.)

    python genalign/datasets/drawbench/build.py          # rewrite the three files
    python genalign/datasets/drawbench/build.py --check  # exit 1 if a committed file differs
"""

from __future__ import annotations

import argparse
import csv
import json
import random
import sys
from pathlib import Path

SEED = 20260504
HELD_OUT = 8
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # genalign/datasets/build_common.py
from build_common import write_or_check  # noqa: E402

CATEGORIES = (
    "Colors",
    "Conflicting",
    "Counting",
    "DALL-E",
    "Descriptions",
    "Gary Marcus et al.",
    "Misspellings",
    "Positional",
    "Rare Words",
    "Reddit",
    "Text",
)
"""DrawBench's 11 categories, in the sheet's order."""


def read_sheet(path: Path = HERE / "drawbench.csv") -> list[dict[str, str]]:
    with open(path, newline="", encoding="utf-8") as handle:
        rows = [{"prompt": row["Prompt"], "category": row["Category"]} for row in csv.DictReader(handle)]
    unknown = sorted({row["category"] for row in rows} - set(CATEGORIES))
    if len(rows) != 200 or unknown:
        raise ValueError(
            f"{path}: expected DrawBench's 200 prompts in {len(CATEGORIES)} categories, got {len(rows)} "
            f"rows (unknown categories: {unknown})"
        )
    return rows


def held_out(rows: list[dict[str, str]], seed: int = SEED, count: int = HELD_OUT) -> list[int]:
    """`count` row indices, one each from `count` categories drawn with `seed`, sorted."""
    rng = random.Random(seed)
    chosen = rng.sample(CATEGORIES, count)
    picks = [rng.choice([i for i, row in enumerate(rows) if row["category"] == category]) for category in chosen]
    return sorted(picks)


def outputs(rows: list[dict[str, str]]) -> dict[Path, str]:
    test = set(held_out(rows))
    return {
        HERE / "prompts.jsonl": "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows),
        HERE / "train_192.txt": "".join(row["prompt"] + "\n" for i, row in enumerate(rows) if i not in test),
        HERE / "test_8.txt": "".join(rows[i]["prompt"] + "\n" for i in sorted(test)),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if a committed file differs from a fresh build")
    args = parser.parse_args(argv)
    return write_or_check(outputs(read_sheet()), args.check, "genalign/datasets/drawbench/build.py")


if __name__ == "__main__":
    sys.exit(main())
