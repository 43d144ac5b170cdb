"""Build the tiny image-to-video prompt set: `train.jsonl`, `test.jsonl` and their first frames
under `images/` (deterministic, offline).

Each row is a motion prompt and the picture that is the video's first frame, drawn from the toy
shapes world (genalign/data/toy_shapes.py: 4 shapes x 6 colours on a grey canvas):

    {"prompt": "the red circle slides to the left", "source_image": "images/train_00.png",
     "motion": "slides to the left", "source": {"color": "red", "shape": "circle"}}

The motion cycles through six (slides left / right / up / down, spins, grows). The first-and-last
frame manifests (`train_flf2v.jsonl`, `test_flf2v.jsonl`: Wan 2.1 FLF2V) give each row's first frame
and a last frame of the same shape and colour drawn again elsewhere (`"source_images": [first,
last]`, the last frames `<split>_NN_last.png`), prompted to move from one to the other. Training rows
animate red, yellow, green and blue shapes; the test rows the held-out orange and purple ones
(the toy prompt set's split). Images are 480x480 (`train.jsonl`, `test.jsonl`: the Wan 2.2
I2V-A14B recipe's rollout), 240x240 (`train_240.jsonl`, `test_240.jsonl`, `images_240/`: the
Wan 2.1 I2V recipe's) and 640x640 (`train_640.jsonl`, `test_640.jsonl`, `images_640/`: the
HunyuanVideo 1.5 I2V recipe's, the size bucket its 480p pipeline makes of a square first frame),
the same pictures drawn at each size (a manifest's images have the rollout's size).

    python genalign/datasets/i2v/build.py           # rewrite the manifests and images
    python genalign/datasets/i2v/build.py --check   # exit 1 if the committed files differ from a fresh build
    python genalign/datasets/i2v/build.py --out DIR --size 32   # one small copy elsewhere (the tests' tiny runs)
"""

from __future__ import annotations

import argparse
import io
import json
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2]))  # the checkout root: genalign/datasets/i2v -> ../../..

from genalign.data.toy_shapes import COLOR_NAMES, SHAPES, render  # noqa: E402
from genalign.datasets.build_common import write_or_check, write_or_check_files  # noqa: E402

SIZES = (480, 240, 640)
"""The shipped sizes: the first without a suffix (train.jsonl, images/), the others with one."""
HELD_OUT_COLORS = ("orange", "purple")
MOTIONS = ("slides to the left", "slides to the right", "rises to the top", "falls to the bottom", "spins", "grows")
SEED = 20261127
LAST_FRAME_SEED = SEED + 1
"""The last frames' own draws, so the first frames stay those of the one-image manifests."""
FLF2V_MOTION = "glides to where the last frame shows it"
ONE_IMAGE_SIZES = (640,)
"""Sizes shipped without first-and-last-frame manifests: 640 is the HunyuanVideo 1.5 I2V recipe's
one-image size (the FLF2V recipe reads 240; a size given with --size gets both forms)."""


def rows(split: str, colors: tuple[str, ...], images: str) -> list[dict]:
    """The split's rows: each (colour, shape) once, with the next motion of the cycle; the first
    frames under the folder `images`."""
    pairs = [(color, shape) for color in colors for shape in SHAPES]
    return [
        {
            "prompt": f"the {color} {shape} {MOTIONS[index % len(MOTIONS)]}",
            "source_image": f"{images}/{split}_{index:02d}.png",
            "motion": MOTIONS[index % len(MOTIONS)],
            "source": {"color": color, "shape": shape},
        }
        for index, (color, shape) in enumerate(pairs)
    ]


def build(sizes: tuple[int, ...] = SIZES) -> tuple[dict[str, str], dict[str, bytes]]:
    """(manifest name -> text, image path relative to the folder -> PNG bytes of uint8 [size, size, 3])
    for each size (the first without a suffix); every size draws the same pictures (one seed)."""
    from PIL import Image

    manifests, images = {}, {}
    train_colors = tuple(c for c in COLOR_NAMES if c not in HELD_OUT_COLORS)
    for number, size in enumerate(sizes):
        suffix = f"_{size}" if number else ""
        rng = np.random.default_rng(SEED)
        for split, colors in (("train", train_colors), ("test", HELD_OUT_COLORS)):
            split_rows = rows(split, colors, f"images{suffix}")
            for row in split_rows:
                pixels = render(row["source"]["shape"], row["source"]["color"], rng, size=size, centre_jitter=0.1)
                buffer = io.BytesIO()
                Image.fromarray(pixels).save(buffer, format="PNG", optimize=True)
                images[row["source_image"]] = buffer.getvalue()
            manifests[f"{split}{suffix}.jsonl"] = "".join(json.dumps(row) + "\n" for row in split_rows)
        if size in ONE_IMAGE_SIZES:
            continue
        last_rng = np.random.default_rng(LAST_FRAME_SEED)
        for split, colors in (("train", train_colors), ("test", HELD_OUT_COLORS)):
            flf2v_rows = []
            for row in rows(split, colors, f"images{suffix}"):
                color, shape = row["source"]["color"], row["source"]["shape"]
                last = row["source_image"].replace(".png", "_last.png")
                pixels = render(shape, color, last_rng, size=size, centre_jitter=0.25)
                buffer = io.BytesIO()
                Image.fromarray(pixels).save(buffer, format="PNG", optimize=True)
                images[last] = buffer.getvalue()
                prompt = f"the {color} {shape} {FLF2V_MOTION}"
                flf2v_rows.append(
                    {"prompt": prompt, "source_images": [row["source_image"], last], "motion": FLF2V_MOTION}
                    | {"source": row["source"]}
                )
            manifests[f"{split}_flf2v{suffix}.jsonl"] = "".join(json.dumps(row) + "\n" for row in flf2v_rows)
    return manifests, images


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare with the committed files instead of writing")
    parser.add_argument("--out", type=Path, default=HERE, help="the folder to write or check (default: this one)")
    parser.add_argument(
        "--size", type=int, default=None, help="one image side in pixels (default: the shipped 480, 240, 640)"
    )
    args = parser.parse_args(argv)
    manifests, images = build((args.size,) if args.size else SIZES)
    script = "genalign/datasets/i2v/build.py"
    for folder in {Path(name).parent for name in images}:
        (args.out / folder).mkdir(parents=True, exist_ok=True)
    texts = write_or_check({args.out / name: text for name, text in manifests.items()}, args.check, script)
    return texts or write_or_check_files(images, args.out, args.check, script)


if __name__ == "__main__":
    sys.exit(main())
