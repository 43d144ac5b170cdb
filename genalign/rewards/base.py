"""`RewardFunction`: the contract every scorer implements.

Where it fits: the reward runtime calls `score` on decoded rollout images (uint8
[B, 3, H, W], identical at train and eval time; video [B, F, 3, H, W] is scored per frame
by `rewards/video.py` unless the scorer sets `video_native`) with the prompts and metadata;
the composite weights the components. A reward never imports a model family.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import torch


class RewardError(RuntimeError):
    """A scorer produced an unusable score; the message names the reward, prompt and sample."""


@runtime_checkable
class RewardFunction(Protocol):
    name: str
    """Short registry name, e.g. "ocr"."""

    def score(self, images: torch.Tensor, prompts: list[str], metadata: list[dict[str, Any]]) -> torch.Tensor:
        """uint8 images [B, 3, H, W] + prompts -> float32 scores [B] on the CPU."""
        ...

    def offload(self) -> None:
        """Move weights off the accelerator (called before training); no-op for rule rewards."""
        ...

    def onload(self) -> None:
        """Bring weights back before scoring."""
        ...
