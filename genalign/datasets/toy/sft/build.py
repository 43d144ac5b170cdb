"""Build the toy image–prompt dataset `images.jsonl` + `images/` (deterministic, offline).

For every training prompt of genalign/datasets/toy/train.txt, IMAGES_PER_PROMPT renders of the
prompted shape in the prompted colour (genalign/data/toy_shapes.py, one seeded numpy generator)
at the sizes and places the demo model was pretrained on (models/toy/pretrain.py's extent and
centre jitter): the "good images" that `experiment/toy/shapes_sft` fine-tunes the
demo model on with the flow-matching loss (docs/preference_data.md). They come from the toy
world's renderer, not from the model, so they are what a curated dataset is to a real model.
PNG encoding of equal pixels is byte-identical.

    python genalign/datasets/toy/sft/build.py           # rewrite images.jsonl and images/
    python genalign/datasets/toy/sft/build.py --check   # exit 1 if the committed files differ
"""

from __future__ import annotations

import argparse
import io
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[3]))  # the checkout root
sys.path.insert(0, str(HERE.parents[1]))  # genalign/datasets/build_common.py

import numpy as np  # noqa: E402
from build_common import write_or_check_files  # noqa: E402

from genalign.data.prompts import load_manifest  # noqa: E402
from genalign.data.toy_shapes import parse_prompt, render  # noqa: E402
from genalign.models.toy.pretrain import PretrainOptions  # noqa: E402

IMAGES_PER_PROMPT = 6
SEED = 2025


def build() -> dict[str, bytes]:
    """Relative file name -> content."""
    from PIL import Image

    rng = np.random.default_rng(SEED)
    placement = PretrainOptions()  # the demo model's own pretraining renders: its image domain
    files: dict[str, bytes] = {}
    rows = []
    for prompt_index, example in enumerate(load_manifest(str(HERE.parent / "train.txt"))):
        parsed = parse_prompt(example.prompt)
        for k in range(IMAGES_PER_PROMPT):
            name = f"images/{prompt_index:02d}_{k}.png"
            buffer = io.BytesIO()
            Image.fromarray(
                render(parsed.shape, parsed.color, rng, extent=placement.extent, centre_jitter=placement.centre_jitter)
            ).save(buffer, format="PNG", optimize=True)
            files[name] = buffer.getvalue()
            rows.append({"prompt": example.prompt, "image": name})
    files["images.jsonl"] = "".join(json.dumps(row) + "\n" for row in rows).encode()
    return files


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare with the committed files instead of writing")
    script = "genalign/datasets/toy/sft/build.py"
    return write_or_check_files(build(), HERE, parser.parse_args(argv).check, script)


if __name__ == "__main__":
    raise SystemExit(main())
