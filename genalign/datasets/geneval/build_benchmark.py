"""Build `evaluation_metadata.jsonl`: GenEval's published 553-prompt benchmark suite (offline).

GenEval's authors generated their suite with a seeded NumPy generator (djghosh13/geneval
`prompts/create_prompts.py`, commit af4902f: `numpy.random.default_rng(43)`, 100 draws per
task): every one of the 80 classes once as a single object, then 100 two-object, 100
counting (2-4, with an `exclude` clause for count + 1), 100 colour (never "person"), 100
position and 100 colour-attribution draws, duplicates dropped, in that order. This script
makes the same draws from the same generator, in the same order, with GenEval's class list
(`genalign/assets/geneval/object_names.txt`), so it writes the published file byte for byte:
553 rows (80 single object, 99 two object, 80 counting, 94 colours, 100 position, 100
colour attribution) whose sha256 is `PUBLISHED_SHA256`, the digest of the file in that
repository (read from a stored copy; the file itself was not copied). `--check` also
verifies that digest, so a NumPy release that changed its generator would be caught.

    python genalign/datasets/geneval/build_benchmark.py          # write evaluation_metadata.jsonl
    python genalign/datasets/geneval/build_benchmark.py --check  # exit 1 if stale or not the published bytes
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

SEED = 43
"""create_prompts.py's default `--seed`, the suite the paper reports."""
DRAWS_PER_TASK = 100
PUBLISHED_SHA256 = "5c48e0813e812e3c373fa5c8ed07a8f0a483be30272b4427b0559c8048e67c13"
"""sha256 of djghosh13/geneval `prompts/evaluation_metadata.jsonl` at commit af4902f (85209 bytes)."""
HERE = Path(__file__).resolve().parent
OUTPUT = HERE / "evaluation_metadata.jsonl"
CLASSES = (HERE.parents[1] / "assets" / "geneval" / "object_names.txt").read_text().splitlines()
COLORS = ["red", "orange", "yellow", "green", "blue", "purple", "pink", "brown", "black", "white"]
POSITIONS = ["left of", "right of", "above", "below"]
NUMBERS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"]
PERSON = CLASSES.index("person")


def article(name: str) -> str:
    return f"an {name}" if name[0] in "aeiou" else f"a {name}"


def plural(name: str) -> str:
    return f"{name}es" if name.endswith("s") else f"{name}s"


def not_person(offsets: np.ndarray | int) -> np.ndarray | int:
    """A draw from the 79 classes after "person" (wrapping round): GenEval colours no person."""
    return (offsets + 1 + PERSON) % len(CLASSES)


def single_objects(rng: np.random.Generator) -> list[dict[str, Any]]:
    order = rng.choice(len(CLASSES), size=len(CLASSES), replace=False)
    return [
        {
            "tag": "single_object",
            "include": [{"class": CLASSES[i], "count": 1}],
            "prompt": f"a photo of {article(CLASSES[i])}",
        }
        for i in order
    ]


def two_objects(rng: np.random.Generator) -> dict[str, Any]:
    a, b = (CLASSES[i] for i in rng.choice(len(CLASSES), size=2, replace=False))
    return {
        "tag": "two_object",
        "include": [{"class": a, "count": 1}, {"class": b, "count": 1}],
        "prompt": f"a photo of {article(a)} and {article(b)}",
    }


def counting(rng: np.random.Generator) -> dict[str, Any]:
    name = CLASSES[rng.choice(len(CLASSES))]
    count = int(rng.integers(2, 4, endpoint=True))
    return {
        "tag": "counting",
        "include": [{"class": name, "count": count}],
        "exclude": [{"class": name, "count": count + 1}],
        "prompt": f"a photo of {NUMBERS[count]} {plural(name)}",
    }


def colors(rng: np.random.Generator) -> dict[str, Any]:
    name = CLASSES[not_person(rng.choice(len(CLASSES) - 1))]
    color = COLORS[rng.choice(len(COLORS))]
    return {
        "tag": "colors",
        "include": [{"class": name, "count": 1, "color": color}],
        "prompt": f"a photo of {article(color)} {name}",
    }


def position(rng: np.random.Generator) -> dict[str, Any]:
    a, b = (CLASSES[i] for i in rng.choice(len(CLASSES), size=2, replace=False))
    relation = POSITIONS[rng.choice(len(POSITIONS))]
    return {
        "tag": "position",
        "include": [{"class": b, "count": 1}, {"class": a, "count": 1, "position": [relation, 0]}],
        "prompt": f"a photo of {article(a)} {relation} {article(b)}",
    }


def color_attribution(rng: np.random.Generator) -> dict[str, Any]:
    a, b = (CLASSES[i] for i in not_person(rng.choice(len(CLASSES) - 1, size=2, replace=False)))
    color_a, color_b = (COLORS[i] for i in rng.choice(len(COLORS), size=2, replace=False))
    return {
        "tag": "color_attr",
        "include": [{"class": a, "count": 1, "color": color_a}, {"class": b, "count": 1, "color": color_b}],
        "prompt": f"a photo of {article(color_a)} {a} and {article(color_b)} {b}",
    }


def suite(seed: int = SEED, draws: int = DRAWS_PER_TASK) -> list[dict[str, Any]]:
    """The rows in GenEval's order, the first of each duplicate kept."""
    rng = np.random.default_rng(seed)
    rows = single_objects(rng)
    for make in (two_objects, counting, colors, position, color_attribution):
        rows += [make(rng) for _ in range(draws)]
    seen: set[str] = set()
    unique = []
    for row in rows:
        key = json.dumps(row, sort_keys=True)
        if key not in seen:
            seen.add(key)
            unique.append(row)
    return unique


def render(rows: list[dict[str, Any]]) -> str:
    return "".join(json.dumps(row) + "\n" for row in rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the file is stale or not the published bytes")
    args = parser.parse_args(argv)
    text = render(suite())
    digest = hashlib.sha256(text.encode()).hexdigest()
    if digest != PUBLISHED_SHA256:
        print(
            f"the rebuilt suite's sha256 {digest} is not GenEval's {PUBLISHED_SHA256} (a NumPy generator change?)",
            file=sys.stderr,
        )
        return 1
    if args.check:
        if not OUTPUT.exists() or OUTPUT.read_bytes() != text.encode():
            print(f"out of date (run python {Path(__file__).name}): {OUTPUT}", file=sys.stderr)
            return 1
        return 0
    OUTPUT.write_bytes(text.encode())
    print(f"wrote {OUTPUT} ({text.count(chr(10))} prompts, sha256 {digest})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
