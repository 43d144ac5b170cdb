"""`TokenTrajectoryBatch`: a token-autoregressive rollout (Janus-Pro) for rewards and replay.

Where it fits: the token collector fills it, the reward runtime reads `images`/`prompts`, the
AR-GRPO algorithm replays `tokens` through the current policy by teacher forcing and compares
with `log_probs`. It has the surface the trainer, the update loop, the evaluator and the Ray
engine use on a `TrajectoryBatch` (len, prompts, group_ids, seeds, images, metadata, log_probs,
index/to/split/cat), so none of them asks which kind of trajectory it holds.

A token trajectory has one trained *position*: the whole token sequence, scored in one
forward. `log_probs[:, 0]` is that position's per-token log-probs, so code that reads
`log_probs[:, j]` for a trained position j (the parity preflight) covers every token.

Shapes (B samples, N image tokens per sample, L prompt tokens, P log-prob positions):
    condition            `TokenCondition` with [B, L] prompt ids / masks (both CFG streams)
    tokens      [B, N]     int64 sampled image tokens (Janus-Pro), or [B, N, ...] float32
                           continuous tokens with what their log-probs need (NextStep-1: each
                           token's flow-head walk, [B, N, K + 1, D])
    log_probs   [B, 1, P]  float32 log-prob of each position under the sampling policy (CFG and
                           temperature included), recomputed by teacher forcing in the rollout;
                           P = N for discrete tokens, N·(K − 1) head steps for NextStep-1
    images      [B, 3, H, W] uint8 VQ-decoded images
    proximal_log_probs [B, 1, P] optional: the trained policy's log-probs at the start of the
                           update (rollout correction); log_probs stay the behaviour's
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import torch

from genalign.models.base import TokenCondition
from genalign.rollout.batch import TrajectoryBatch


@dataclass
class TokenTrajectoryBatch:
    prompts: list[str]
    prompt_ids: torch.Tensor  # [B] int64: index of the prompt in its manifest (group key)
    group_ids: torch.Tensor  # [B] int64: index of the group within this step
    seeds: torch.Tensor  # [B] int64: per-sample seed of the token sampler
    condition: TokenCondition
    tokens: torch.Tensor  # [B, N] int64, or [B, N, ...] float32 continuous tokens
    log_probs: torch.Tensor  # [B, 1, P] float32
    images: torch.Tensor  # [B, 3, H, W] uint8
    guidance_scale: float = 1.0
    temperature: float = 1.0
    scored_guidance_scale: float = 1.0
    """The guidance `log_probs` are taken at: `guidance_scale` (the sampling distribution), or 1
    (the conditional stream alone, algorithm.token_log_prob=conditional). Replay uses it."""
    proximal_log_probs: torch.Tensor | None = None  # [B, 1, P] float32
    metadata: list[dict] = field(default_factory=list)

    ROW_TENSORS = ("prompt_ids", "group_ids", "seeds", "tokens", "log_probs", "images", "proximal_log_probs")
    """Fields with one row per sample (selected by `index`, joined by `cat`)."""
    REPLAYED = ("tokens", "log_probs", "proximal_log_probs")
    """Fields replay reads on the policy's device (moved by `to`)."""

    def __len__(self) -> int:
        return len(self.prompts)

    @property
    def num_steps(self) -> int:
        """Trained positions per trajectory: one, the whole token sequence."""
        return 1

    @property
    def num_tokens(self) -> int:
        return self.tokens.shape[1]

    def validate(self) -> None:
        """Raise ValueError when fields disagree in batch size or position count."""
        size, count = len(self.prompts), self.log_probs.shape[-1]
        checks = {
            "prompt_ids": self.prompt_ids.shape == (size,),
            "group_ids": self.group_ids.shape == (size,),
            "seeds": self.seeds.shape == (size,),
            "condition": len(self.condition) == size,
            "tokens": self.tokens.shape[0] == size
            and (self.tokens.dim() == 2 and self.tokens.dtype == torch.long or self.tokens.is_floating_point()),
            "log_probs": self.log_probs.dim() == 3 and self.log_probs.shape[:2] == (size, 1),
            "images": self.images.shape[0] == size and self.images.dtype == torch.uint8,
            "proximal_log_probs": self.proximal_log_probs is None or self.proximal_log_probs.shape == (size, 1, count),
            "metadata": not self.metadata or len(self.metadata) == size,
        }
        bad = [name for name, ok in checks.items() if not ok]
        if bad:
            raise ValueError(f"TokenTrajectoryBatch fields {bad} disagree with B={size}, P={count}")

    def index(self, idx: torch.Tensor | slice | list[int]) -> "TokenTrajectoryBatch":
        """Select samples."""
        positions = list(range(len(self)))[idx] if isinstance(idx, slice) else torch.as_tensor(idx).tolist()
        rows = torch.as_tensor(positions, dtype=torch.long)
        selected = {
            name: None if getattr(self, name) is None else getattr(self, name)[rows] for name in self.ROW_TENSORS
        }
        return dataclasses.replace(
            self,
            prompts=[self.prompts[i] for i in positions],
            condition=self.condition.index(rows),
            metadata=[self.metadata[i] for i in positions] if self.metadata else [],
            **selected,
        )

    def to(self, device: torch.device | str) -> "TokenTrajectoryBatch":
        """The replayed tensors on `device` (once per micro-batch); images and ids stay on the CPU."""
        moved = {
            name: None if getattr(self, name) is None else getattr(self, name).to(device) for name in self.REPLAYED
        }
        return dataclasses.replace(self, condition=self.condition.to(device), **moved)

    def split(self, chunk_size: int) -> list["TokenTrajectoryBatch"]:
        return [self.index(slice(start, start + chunk_size)) for start in range(0, len(self), chunk_size)]

    @staticmethod
    def cat(batches: list["TokenTrajectoryBatch"]) -> "TokenTrajectoryBatch":
        """Join batches sampled with one guidance scale and temperature. Prompt ids of chunks
        padded to different lengths are left-padded again to the longest (pad id 0 with mask 0:
        a masked position is never attended to, whatever its id)."""
        first = batches[0]
        for other in batches[1:]:
            if (other.guidance_scale, other.temperature, other.scored_guidance_scale) != (
                first.guidance_scale,
                first.temperature,
                first.scored_guidance_scale,
            ):
                raise ValueError("cannot concatenate token trajectories sampled with different guidance or temperature")
            if (other.proximal_log_probs is None) != (first.proximal_log_probs is None):
                raise ValueError("cannot concatenate token trajectories with and without proximal log-probs")
        joined = {
            name: None if getattr(first, name) is None else torch.cat([getattr(b, name) for b in batches])
            for name in TokenTrajectoryBatch.ROW_TENSORS
        }
        length = max(b.condition.input_ids.shape[1] for b in batches)
        condition = TokenCondition.cat([b.condition.map(lambda t: _left_pad(t, length)) for b in batches])
        return dataclasses.replace(
            first,
            prompts=[p for b in batches for p in b.prompts],
            condition=condition,
            metadata=[m for b in batches for m in b.metadata],
            **joined,
        )


def _left_pad(ids: torch.Tensor, length: int) -> torch.Tensor:
    """[B, L] -> [B, length] with zeros on the left (ids of masked positions and the mask itself)."""
    return torch.nn.functional.pad(ids, (length - ids.shape[1], 0), value=0)


Trajectories = TrajectoryBatch | TokenTrajectoryBatch
"""A step's rollout: flow-matching SDE trajectories or image-token sequences (what a
`RolloutEngine` returns and an algorithm's `training_batch` takes)."""
