"""The before/after picture of the default run (README, docs/demo.md), cut from its two contact
sheets.

    python benchmarks/demo_figure.py RUN_DIR docs/training_examples/before_after.png [--samples 4]

Reads `RUN_DIR/eval_epoch_0/contact_sheet.png` and the last `eval_epoch_<step>` sheet, takes
the first `--samples` images of every held-out prompt from each (the same seeds before and
after), and writes one small PNG: a row per prompt, "before" on the left, "after" on the right.
The geometry of a sheet (tile size, caption band, columns) is recomputed from the run's eval
config the way `evaluation.contact_sheet` lays it out, so no image is re-generated.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from omegaconf import OmegaConf
from PIL import Image, ImageDraw, ImageFont

from genalign.evaluation.contact_sheet import MAX_COLUMNS, PADDING, tile_scale

IMAGE_SIDE = 32
"""Side of the toy model's images (data.toy_shapes.IMAGE_SIZE)."""
SHOWN_SCALE = 2
"""Tiles in the figure: IMAGE_SIDE x SHOWN_SCALE pixels a side."""


def sheet_tiles(sheet: Image.Image, prompts: int, per_prompt: int, samples: int) -> list[list[Image.Image]]:
    """[prompt][sample] tiles cut from a contact sheet of prompts x per_prompt images, 2 caption lines."""
    scale = tile_scale(IMAGE_SIDE, IMAGE_SIDE)
    tile = IMAGE_SIDE * scale
    font = ImageFont.load_default()
    band = 2 * (font.getbbox("Ag")[3] + 2) + 2 * PADDING
    columns = min(prompts * per_prompt, MAX_COLUMNS)
    out = []
    for prompt in range(prompts):
        row = []
        for sample in range(samples):
            index = prompt * per_prompt + sample
            y, x = divmod(index, columns)
            box = (x * tile, y * (tile + band), (x + 1) * tile, y * (tile + band) + tile)
            row.append(sheet.crop(box).resize((IMAGE_SIDE * SHOWN_SCALE,) * 2, Image.Resampling.NEAREST))
        out.append(row)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir")
    parser.add_argument("out")
    parser.add_argument("--samples", type=int, default=4)
    args = parser.parse_args()
    run = Path(args.run_dir)
    config = OmegaConf.load(run / "config.yaml")  # the run's resolved config
    per_prompt = int(config.eval.samples_per_prompt)
    steps = sorted(int(p.name.rsplit("_", 1)[1]) for p in run.glob("eval_epoch_*"))
    names = [line.strip() for line in Path(config.data.eval_manifest).read_text().splitlines() if line.strip()]
    names = names[: int(config.eval.max_prompts)]
    before, after = (
        sheet_tiles(
            Image.open(run / f"eval_epoch_{s}" / "contact_sheet.png").convert("RGB"),
            len(names),
            per_prompt,
            args.samples,
        )
        for s in (steps[0], steps[-1])
    )
    side, gap, label_w, head = IMAGE_SIDE * SHOWN_SCALE, 16, 110, 18
    width = label_w + 2 * args.samples * side + gap
    figure = Image.new("RGB", (width, head + len(names) * side), "white")
    draw = ImageDraw.Draw(figure)
    draw.text((label_w, 3), f"before (step {steps[0]})", fill="black")
    draw.text((label_w + args.samples * side + gap, 3), f"after (step {steps[-1]})", fill="black")
    for row, name in enumerate(names):
        y = head + row * side
        draw.text((4, y + side // 2 - 6), name, fill="black")
        for column in range(args.samples):
            figure.paste(before[row][column], (label_w + column * side, y))
            figure.paste(after[row][column], (label_w + args.samples * side + gap + column * side, y))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    figure.save(args.out, format="PNG", optimize=True)
    print(f"wrote {args.out} ({figure.size[0]}x{figure.size[1]}) from steps {steps[0]} and {steps[-1]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
