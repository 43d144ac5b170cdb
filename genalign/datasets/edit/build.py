"""Build the tiny instruction-editing prompt set: `train.jsonl`, `test.jsonl` and their source
images under `images/` (deterministic, offline).

Each row is an edit instruction and the picture it edits, drawn from the toy shapes world
(genalign/data/toy_shapes.py: 4 shapes x 6 colours on a grey canvas):

    {"prompt": "make the red circle blue", "source_image": "images/train_00.png",
     "edit": "recolour", "source": {"color": "red", "shape": "circle"},
     "target": {"color": "blue", "shape": "circle"}}

Half the rows recolour the shape, half turn it into another shape; `source` / `target` say what
the picture shows before and after, for a reward that checks the edit. Training rows edit the
colours red, yellow, green and blue; the test rows edit orange and purple shapes (held out, as
the toy prompt set). Images are 512x512, the size of the FLUX.1 Kontext recipe's rollout.

    python genalign/datasets/edit/build.py           # rewrite the manifests and images
    python genalign/datasets/edit/build.py --check   # exit 1 if the committed files differ from a fresh build
    python genalign/datasets/edit/build.py --out DIR --size 64   # a small copy elsewhere (the tests' tiny runs)
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2]))  # the checkout root: genalign/datasets/edit -> ../../..

from genalign.data.toy_shapes import COLOR_NAMES, SHAPES, render  # noqa: E402

SIZE = 512
HELD_OUT_COLORS = ("orange", "purple")
SEED = 20261126


def rows(split: str, colors: tuple[str, ...]) -> list[dict]:
    """The split's edits: for each (colour, shape), one recolour or one reshape, alternating."""
    out = []
    pairs = [(color, shape) for color in colors for shape in SHAPES]
    for index, (color, shape) in enumerate(pairs):
        if index % 2 == 0:  # recolour to the next colour of the world
            new_color, new_shape = COLOR_NAMES[(COLOR_NAMES.index(color) + 1) % len(COLOR_NAMES)], shape
            prompt, edit = f"make the {color} {shape} {new_color}", "recolour"
        else:  # reshape into the next shape
            new_color, new_shape = color, SHAPES[(SHAPES.index(shape) + 1) % len(SHAPES)]
            prompt, edit = f"turn the {color} {shape} into a {new_shape}", "reshape"
        out.append(
            {
                "prompt": prompt,
                "source_image": f"images/{split}_{index:02d}.png",
                "edit": edit,
                "source": {"color": color, "shape": shape},
                "target": {"color": new_color, "shape": new_shape},
            }
        )
    return out


def build(size: int = SIZE) -> tuple[dict[str, str], dict[str, np.ndarray]]:
    """(manifest name -> text, image path relative to the folder -> uint8 [size, size, 3])."""
    rng = np.random.default_rng(SEED)
    manifests, images = {}, {}
    train_colors = tuple(c for c in COLOR_NAMES if c not in HELD_OUT_COLORS)
    for split, colors in (("train", train_colors), ("test", HELD_OUT_COLORS)):
        split_rows = rows(split, colors)
        for row in split_rows:
            source = row["source"]
            images[row["source_image"]] = render(source["shape"], source["color"], rng, size=size, centre_jitter=0.15)
        manifests[f"{split}.jsonl"] = "".join(json.dumps(row) + "\n" for row in split_rows)
    return manifests, images


def write(folder: Path, size: int = SIZE) -> None:
    """The manifests and images written under `folder` (a test writes a small copy elsewhere)."""
    from PIL import Image

    manifests, images = build(size)
    for name, text in manifests.items():
        (folder / name).write_text(text)
    for name, pixels in images.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(pixels).save(folder / name, optimize=True)


def stale(folder: Path, size: int = SIZE) -> list[str]:
    """The files under `folder` that differ from a fresh build (images compared by pixels)."""
    from PIL import Image

    manifests, images = build(size)
    out = [
        name for name, text in manifests.items() if not (folder / name).is_file() or (folder / name).read_text() != text
    ]
    for name, pixels in images.items():
        path = folder / name
        if not path.is_file():
            out.append(name)
            continue
        with Image.open(path) as image:
            if not np.array_equal(np.asarray(image.convert("RGB")), pixels):
                out.append(name)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare with the committed files instead of writing")
    parser.add_argument("--out", type=Path, default=HERE, help="the folder to write or check (default: this one)")
    parser.add_argument("--size", type=int, default=SIZE, help="image side in pixels (the shipped set: 512)")
    args = parser.parse_args(argv)
    if not args.check:
        write(args.out, args.size)
        return 0
    found = stale(args.out, args.size)
    if found:
        print(f"stale: {found}; run python genalign/datasets/edit/build.py", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
