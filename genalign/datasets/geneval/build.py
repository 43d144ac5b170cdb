"""Build the GenEval prompt sets `train.jsonl` and `test.jsonl` (deterministic, offline).

Every line is one JSON object in GenEval's metadata format: `prompt`, `tag` (single_object,
two_object, counting, colors, position, color_attr), an `include` list of clauses
(`class`, `count`, optional `color`, optional `position: [relation, index of the target
clause]`) and, for counting, an `exclude` clause (`count + 1` of the class must not be
there). The geneval reward (genalign/rewards/geneval.py) reads these fields as the sample's
metadata; the `.jsonl` manifest reader passes every field but `prompt` through.

The six tasks are generated as GenEval defines them (djghosh13/geneval, prompts/
create_prompts.py): GenEval's 80 COCO object classes (its object_names.txt, shipped as
genalign/assets/geneval/object_names.txt), its ten colours, counts 2-4, "a"/"an" and plurals
as it writes them, no coloured "person". The test set draws the six
tags in equal shares (2212 prompts, Flow-GRPO's test-set size; single_object and counting
repeat prompts, their tasks being small); the training set uses Flow-GRPO's GenEval training
mix (position 0.7, counting 0.5, color_attr 0.3, colors 0.1, two_object 0.1, normalised; no
single_object) with repeats, and never contains a test prompt: counting, with only 240
possible prompts, is split in halves between the sets.

    python genalign/datasets/geneval/build.py           # rewrite train.jsonl and test.jsonl
    python genalign/datasets/geneval/build.py --check   # exit 1 if the committed files differ from a fresh build

The output is a pure function of SEED, the sizes and the lists below (Python's
`random.Random` is stable across versions), so a re-run reproduces the committed files byte
for byte.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path
from typing import Any

SEED = 20251125
TRAIN_SIZE = 10000
TEST_SIZE = 2212
"""Flow-GRPO's GenEval test set size; its training set has 50000 lines (--train-size 50000)."""
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # genalign/datasets/build_common.py
from build_common import write_or_check  # noqa: E402

OBJECT_NAMES = HERE.parents[1] / "assets" / "geneval" / "object_names.txt"  # genalign/assets/geneval/
CLASSES = OBJECT_NAMES.read_text().splitlines()
"""COCO's 80 instance classes in GenEval's spelling: GenEval's own object_names.txt (shipped
with the geneval reward; "computer mouse", "tv remote", "computer keyboard" where the detector's
COCO labels say "mouse", "remote", "keyboard": the reward maps them)."""
COLORS = ["red", "orange", "yellow", "green", "blue", "purple", "pink", "brown", "black", "white"]
POSITIONS = ["left of", "right of", "above", "below"]
NUMBERS = ["zero", "one", "two", "three", "four"]
TEST_TAGS = ["single_object", "two_object", "counting", "colors", "position", "color_attr"]
TRAIN_MIX = {"position": 0.7, "counting": 0.5, "color_attr": 0.3, "colors": 0.1, "two_object": 0.1}


def article(name: str) -> str:
    return f"an {name}" if name[0] in "aeiou" else f"a {name}"


def plural(name: str) -> str:
    return f"{name}es" if name.endswith("s") else f"{name}s"


def colourable(rng: random.Random, k: int) -> list[str]:
    """k distinct classes other than person (GenEval gives no colour to people)."""
    return rng.sample([c for c in CLASSES if c != "person"], k)


def make(tag: str, rng: random.Random, counting: list[tuple[str, int]]) -> dict[str, Any]:
    """One GenEval row of `tag`; counting prompts draw (class, count) from `counting`."""
    if tag == "single_object":
        name = rng.choice(CLASSES)
        return {"tag": tag, "include": [{"class": name, "count": 1}], "prompt": f"a photo of {article(name)}"}
    if tag == "two_object":
        a, b = rng.sample(CLASSES, 2)
        return {
            "tag": tag,
            "include": [{"class": a, "count": 1}, {"class": b, "count": 1}],
            "prompt": f"a photo of {article(a)} and {article(b)}",
        }
    if tag == "counting":
        name, count = rng.choice(counting)
        return {
            "tag": tag,
            "include": [{"class": name, "count": count}],
            "exclude": [{"class": name, "count": count + 1}],
            "prompt": f"a photo of {NUMBERS[count]} {plural(name)}",
        }
    if tag == "colors":
        (name,), color = colourable(rng, 1), rng.choice(COLORS)
        return {
            "tag": tag,
            "include": [{"class": name, "count": 1, "color": color}],
            "prompt": f"a photo of {article(color)} {name}",
        }
    if tag == "position":
        a, b = rng.sample(CLASSES, 2)
        relation = rng.choice(POSITIONS)
        return {
            "tag": tag,
            "include": [{"class": b, "count": 1}, {"class": a, "count": 1, "position": [relation, 0]}],
            "prompt": f"a photo of {article(a)} {relation} {article(b)}",
        }
    if tag == "color_attr":
        (a, b), (ca, cb) = colourable(rng, 2), rng.sample(COLORS, 2)
        return {
            "tag": tag,
            "include": [{"class": a, "count": 1, "color": ca}, {"class": b, "count": 1, "color": cb}],
            "prompt": f"a photo of {article(ca)} {a} and {article(cb)} {b}",
        }
    raise ValueError(f"unknown GenEval tag {tag!r}")


def build(train_size: int = TRAIN_SIZE, test_size: int = TEST_SIZE) -> tuple[list[dict], list[dict]]:
    rng = random.Random(SEED)
    # counting has only 80 x 3 prompts: half of them are held out for the test set, so the
    # training set still counts (on the other half) and never sees a test prompt
    pairs = [(name, count) for name in CLASSES for count in (2, 3, 4)]
    rng.shuffle(pairs)
    test_counting, train_counting = pairs[: len(pairs) // 2], pairs[len(pairs) // 2 :]
    test, seen = [], set()
    for index in range(test_size):
        tag = TEST_TAGS[index % len(TEST_TAGS)]
        row = make(tag, rng, test_counting)
        # distinct prompts while the task has fresh ones (single_object has 80, counting 120 here):
        # after 100 draws of repeats, a repeat is kept, as Flow-GRPO's test set repeats them
        for _ in range(100):
            if row["prompt"] not in seen:
                break
            row = make(tag, rng, test_counting)
        seen.add(row["prompt"])
        test.append(row)
    names, weights = list(TRAIN_MIX), list(TRAIN_MIX.values())
    train = []
    while len(train) < train_size:
        row = make(rng.choices(names, weights)[0], rng, train_counting)
        if row["prompt"] not in seen:  # never a test prompt; repeats within train are allowed
            train.append(row)
    return train, test


def render(rows: list[dict]) -> str:
    return "".join(
        json.dumps(
            {
                "tag": r["tag"],
                "include": r["include"],
                **({"exclude": r["exclude"]} if "exclude" in r else {}),
                "prompt": r["prompt"],
            }
        )
        + "\n"
        for r in rows
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare the committed files with a fresh build")
    parser.add_argument("--out", type=Path, default=HERE, help="output folder (default: next to this script)")
    parser.add_argument("--train-size", type=int, default=TRAIN_SIZE)
    parser.add_argument("--test-size", type=int, default=TEST_SIZE)
    args = parser.parse_args(argv)
    train, test = build(args.train_size, args.test_size)
    outputs = {args.out / "train.jsonl": render(train), args.out / "test.jsonl": render(test)}
    return write_or_check(outputs, args.check, Path(__file__).name)


if __name__ == "__main__":
    sys.exit(main())
