"""In-process rollout of a token-autoregressive family: prompt groups -> `TokenTrajectoryBatch`.

Where it fits: step 2 of the loop for a `TokenPolicy` (`collector.generate_chunks` hands token
policies here), in the trainer's process, a Ray rollout worker and the evaluator alike.

Each sample draws its tokens from its own generator seeded with its sample seed, so a sample
is the same whatever batch or shard it is drawn in. The recorded log-probs are recomputed by
teacher forcing with the same function (and the same chunk geometry) replay uses — verl's
"recompute old log-prob" — so the parity preflight's ratio is exactly 1 before the update; the
sampler's own incremental (key-value cache) log-probs differ from them by float rounding only
(tests/integration/test_janus_policy.py measures it).
"""

from __future__ import annotations

from typing import Iterator

import torch

from genalign.data.sampler import PromptGroupBatch
from genalign.models.base import TokenPolicy
from genalign.rollout.chunks import sample_fields, step_chunks
from genalign.rollout.token_batch import TokenTrajectoryBatch


def generate_token_chunks(
    policy: TokenPolicy, groups: PromptGroupBatch, spec, positions: list[int] | None = None
) -> Iterator[TokenTrajectoryBatch]:
    """`collector.generate_chunks` for a token policy: `spec.chunk_size` samples at a time,
    with `spec.guidance_scale` and `spec.temperature`; `positions` samples only those samples
    of the step (prompts are still encoded for the whole step, so every shard has one shape)."""
    policy.check_image_size(spec.height, spec.width)  # a token model has one image size
    scored_guidance = spec.guidance_scale if spec.guided_log_probs else 1.0
    for chunk, chunk_cond in step_chunks(policy, groups, spec, positions):
        generators = [torch.Generator(device=policy.device).manual_seed(seed) for seed in chunk.seeds.tolist()]
        sampled = policy.sample_tokens(chunk_cond, generators, spec.guidance_scale, spec.temperature)
        with torch.no_grad():
            log_probs = policy.token_log_probs(chunk_cond, sampled.tokens, scored_guidance, spec.temperature)
        yield TokenTrajectoryBatch(
            condition=chunk_cond.to("cpu"),
            tokens=sampled.tokens.cpu(),
            log_probs=log_probs.float().cpu()[:, None],  # [b, 1, N]: one trained position
            images=policy.decode_tokens(sampled.tokens),
            guidance_scale=spec.guidance_scale,
            temperature=spec.temperature,
            scored_guidance_scale=scored_guidance,
            **sample_fields(chunk),
        )
