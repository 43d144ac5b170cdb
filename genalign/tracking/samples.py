"""Rows of the rollout sample table: which samples of a step, as images with their rewards.

Where it fits: every `trainer.sample_table.every` steps the trainer hands the step's decoded
images, prompts and reward scores to `log_rollout_samples`, which picks them (`rollout_samples`)
and logs them through the run's sink (its `log_samples`: a `wandb.Table`, TensorBoard images
plus a text table). No tracker is imported here.
"""

from __future__ import annotations

import torch

from genalign.tracking.config import SampleTableConfig
from genalign.tracking.sinks import MetricsSink, Sample


def spread_over_groups(group_ids: list[int], count: int) -> list[int]:
    """Up to `count` sample indices, one per prompt group before a second from any group (so
    a table of 8 from 8 prompts x 8 samples shows 8 prompts), each group in batch order."""
    taken: dict[int, int] = {}
    order = []
    for index, group in enumerate(group_ids):
        order.append((taken.get(group, 0), index))  # (rank within its group, position)
        taken[group] = taken.get(group, 0) + 1
    return sorted(index for _, index in sorted(order)[:count])


def rollout_samples(
    images: torch.Tensor,
    prompts: list[str],
    group_ids: list[int],
    components: dict[str, torch.Tensor],
    total: torch.Tensor,
    count: int,
) -> list[Sample]:
    """`count` samples spread over the prompt groups. `images` uint8 [B, 3, H, W] (or video
    [B, F, 3, H, W]: the first frame is shown); `components` {name: [>= B]} raw scores and
    `total` [>= B] the weighted total, whose first B entries are these images'."""
    from PIL import Image

    rows = []
    for index in spread_over_groups(group_ids, count):
        frame = images[index] if images.dim() == 4 else images[index, 0]  # [3, H, W]
        pixels = frame.detach().to("cpu", torch.uint8).permute(1, 2, 0).contiguous().numpy()  # [H, W, 3]
        rewards = {name: float(scores[index]) for name, scores in components.items()}
        rewards["total"] = float(total[index])
        rows.append(Sample(Image.fromarray(pixels), prompts[index], rewards))
    return rows


def log_rollout_samples(
    sink: MetricsSink, step: int, table: SampleTableConfig, has_trackers: bool, batch, scores
) -> None:
    """At step 1 and every `table.every` steps, when a tracker can show them: a few of the
    step's rollout samples (`batch`: its images, prompts, group ids) with their rewards
    (`scores`: components and total; None for offline pairs, which have none)."""
    if has_trackers and table.every > 0 and (step == 1 or step % table.every == 0) and scores is not None:
        sink.log_samples(
            step,
            "rollout_samples",
            rollout_samples(
                batch.images,
                list(batch.prompts),
                [int(g) for g in batch.group_ids],
                scores.components,
                scores.total,
                table.count,
            ),
        )
