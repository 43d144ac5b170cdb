"""Build the toy prompt lists `train.txt` and `test.txt` (deterministic, offline).

The toy world (genalign/data/toy_shapes.py) has 4 shapes x 6 colours. The split holds out
whole colours: training prompts use red, yellow, green and blue (16 prompts), the test set uses
the held-out colours orange and purple with every shape (8 prompts). The pretrained model has
seen all 24 combinations, but RL never samples a held-out colour, so a test-set gain means the
policy learned *shapes* in general rather than the trained prompts.

    python genalign/datasets/toy/build.py           # rewrite train.txt and test.txt
    python genalign/datasets/toy/build.py --check   # exit 1 if the committed files differ from a fresh build
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2]))  # the checkout root: genalign/datasets/toy -> ../../..

from genalign.data.toy_shapes import COLOR_NAMES, SHAPES, prompt_text  # noqa: E402

HELD_OUT_COLORS = ("orange", "purple")


def build() -> dict[str, str]:
    """File name -> content."""
    train = [prompt_text(c, s) for c in COLOR_NAMES if c not in HELD_OUT_COLORS for s in SHAPES]
    test = [prompt_text(c, s) for c in HELD_OUT_COLORS for s in SHAPES]
    return {"train.txt": "\n".join(train) + "\n", "test.txt": "\n".join(test) + "\n"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare with the committed files instead of writing")
    args = parser.parse_args(argv)
    stale = []
    for name, content in build().items():
        path = HERE / name
        if args.check:
            if not path.is_file() or path.read_text() != content:
                stale.append(name)
        else:
            path.write_text(content)
    if stale:
        print(f"stale: {stale}; run python genalign/datasets/toy/build.py", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
