"""What both collectors share: the step's prompts encoded once, cut into chunks, and the
per-sample fields every trajectory kind carries.

Where it fits: step 2 of the loop. `collector.py` (flow families) and `token_collector.py`
(token families) both walk a step with `step_chunks` and stamp each chunk's trajectories with
`sample_fields`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Iterator, cast

import torch

from genalign.data.sampler import PromptGroupBatch
from genalign.data.source_images import SOURCE_KEY, load_sources, sources_of
from genalign.models.base import (
    Condition,
    FlowPolicy,
    SharedCondition,
    SourceEncoder,
    TokenPolicy,
    encoding_prompts,
)

if TYPE_CHECKING:  # the spec's module imports this one
    from genalign.rollout.collector import SamplingSpec


def encode_distinct(
    policy: FlowPolicy | TokenPolicy,
    prompts: list[str],
    with_negative: bool,
    metadata: Sequence[dict[str, Any]] | None = None,
):
    """(each distinct prompt encoded once [U, ...], the row of each prompt [B]): groups repeat
    prompts. A prompt is its text and its source images (`metadata`'s, data/source_images.py):
    an image-conditioned family's distinct (text, sources) pairs are encoded once, through its
    `encode_conditions` (the sources into `Condition.source_latents`; its text encoder may read
    them too)."""
    rows_metadata = metadata if metadata is not None else [{} for _ in prompts]
    keys = [(prompt, sources_of(row)) for prompt, row in zip(prompts, rows_metadata)]
    unique = list(dict.fromkeys(keys))
    position = {key: i for i, key in enumerate(unique)}
    sources = load_sources([{SOURCE_KEY: list(paths)} for _, paths in unique])  # [U, S, 3, H, W] or None
    if sources is not None and sources.shape[1] > policy.spec.source_images:
        raise ValueError(
            f"model.family={policy.spec.name} takes {policy.spec.source_images} source image(s) per "
            f"prompt; these prompts carry {sources.shape[1]}"
        )
    texts = [prompt for prompt, _ in unique]
    with encoding_prompts(policy):  # text encoders parked on the CPU come to the device for this
        if sources is None:
            encoded = policy.encode_prompts(texts, with_negative=with_negative)
        else:  # the spec says the policy is a SourceEncoder: text and sources together ([U, S, ...] latents)
            encoded = cast(SourceEncoder, policy).encode_conditions(texts, sources, with_negative)
    return encoded, torch.tensor([position[key] for key in keys], device=encoded.device)  # [U, ...], [B]


def step_chunks(
    policy: FlowPolicy | TokenPolicy, groups: PromptGroupBatch, spec: SamplingSpec, positions: list[int] | None = None
) -> Iterator[tuple[PromptGroupBatch, Condition]]:
    """The step's samples (only `positions` when given) as (`spec.chunk_size` samples, their
    encoded condition) pairs, for every kind of policy. The prompts are encoded once for the
    whole step, with the CFG branch when `spec.guidance_scale` > 1 (see `collector.generate`). A flow
    family's condition is a `SharedCondition` on the CPU: every chunk of the step refers to one
    table of the step's distinct prompts (and one negative), which trajectories store."""
    encoded, rows = encode_distinct(policy, groups.prompts, spec.guidance_scale > 1.0, groups.metadata)
    if isinstance(encoded, Condition):
        condition = SharedCondition.of(encoded.to("cpu"), rows.cpu())
    else:  # token prompts are small: per-sample rows
        condition = encoded.index(rows)
    if positions is not None:
        condition = condition.index(torch.tensor(positions, device=condition.device))
        groups = groups.index(positions)
    for start in range(0, len(groups), spec.chunk_size):
        rows = list(range(start, min(start + spec.chunk_size, len(groups))))
        yield groups.index(rows), condition.index(torch.tensor(rows, device=condition.device))


def sample_fields(chunk: PromptGroupBatch) -> dict:
    """The per-sample identity every trajectory kind carries: prompts, ids, seeds, metadata."""
    return dict(
        prompts=list(chunk.prompts),
        prompt_ids=chunk.prompt_ids.clone(),
        group_ids=chunk.group_ids.clone(),
        seeds=chunk.seeds.clone(),
        metadata=[dict(m) for m in chunk.metadata],
    )
