"""Build the toy offline preference dataset `pairs.jsonl` + `images/` (deterministic, offline).

For every training prompt of genalign/datasets/toy/train.txt, the shipped pretrained toy model draws
GROUPS_PER_PROMPT groups of GROUP_SIZE images with the Euler ODE sampler (10 steps, CFG off,
fixed seeds); the `toy_shape` reward scores them, and each group gives one pair: its
highest-scoring image (chosen) and its lowest (rejected). A group whose images all score the
same gives none. This is what `experiment/toy/offline_dpo` trains on (docs/preference_data.md).
fp32 on the CPU is bit-reproducible, and PNG encoding of equal pixels is byte-identical.

    python genalign/datasets/toy/preferences/build.py           # rewrite pairs.jsonl and images/
    python genalign/datasets/toy/preferences/build.py --check   # exit 1 if the committed files differ
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

import torch  # noqa: E402
from build_common import write_or_check_files  # noqa: E402

from genalign.data.prompts import load_manifest  # noqa: E402
from genalign.data.sampler import PromptGroupBatch, sample_seed  # noqa: E402
from genalign.data.toy_shapes import IMAGE_SIZE  # noqa: E402
from genalign.models.toy.policy import ToyPolicy  # noqa: E402
from genalign.rewards.toy import ToyShapeReward  # noqa: E402
from genalign.rollout.collector import SamplingSpec, generate  # noqa: E402

GROUPS_PER_PROMPT = 6
GROUP_SIZE = 8
NUM_STEPS = 10
SEED = 2024


def build() -> dict[str, bytes]:
    """Relative file name -> content."""
    from PIL import Image

    torch.set_num_threads(1)
    policy = ToyPolicy.from_pretrained()
    reward = ToyShapeReward()
    prompts = [example.prompt for example in load_manifest(str(HERE.parent / "train.txt"))]
    spec = SamplingSpec(
        height=IMAGE_SIZE,
        width=IMAGE_SIZE,
        num_steps=NUM_STEPS,
        guidance_scale=1.0,
        noise_level=0.0,
        chunk_size=GROUP_SIZE * GROUPS_PER_PROMPT,
    )
    files: dict[str, bytes] = {}
    rows = []
    for prompt_index, prompt in enumerate(prompts):
        count = GROUP_SIZE * GROUPS_PER_PROMPT
        seeds = torch.tensor([sample_seed(SEED, prompt_index, i) for i in range(count)])
        groups = PromptGroupBatch(
            [prompt] * count,
            torch.full((count,), prompt_index),
            torch.arange(GROUPS_PER_PROMPT).repeat_interleave(GROUP_SIZE),
            seeds,
            [{} for _ in range(count)],
        )
        batch = generate(policy, groups, spec)
        scores = reward.score(batch.images, batch.prompts, batch.metadata)  # [count]
        for group in range(GROUPS_PER_PROMPT):
            members = torch.arange(group * GROUP_SIZE, (group + 1) * GROUP_SIZE)
            values = scores[members]
            if values.max() <= values.min():
                continue
            best, worst = members[values.argmax()], members[values.argmin()]
            row = {"prompt": prompt}
            for role, index in (("chosen", best), ("rejected", worst)):
                name = f"images/{prompt_index:02d}_{group}_{role}.png"
                buffer = io.BytesIO()
                Image.fromarray(batch.images[index].permute(1, 2, 0).numpy()).save(buffer, format="PNG", optimize=True)
                files[name] = buffer.getvalue()
                row[role] = name
            row["chosen_reward"], row["rejected_reward"] = round(float(values.max()), 4), round(float(values.min()), 4)
            rows.append(row)
    files["pairs.jsonl"] = "".join(json.dumps(row) + "\n" for row in rows).encode()
    return files


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare with the committed files instead of writing")
    script = "genalign/datasets/toy/preferences/build.py"
    return write_or_check_files(build(), HERE, parser.parse_args(argv).check, script)


if __name__ == "__main__":
    raise SystemExit(main())
