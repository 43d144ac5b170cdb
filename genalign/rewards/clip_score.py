"""CLIPScore reward: prompt-image agreement under CLIP, scaled like Flow-GRPO (100 cos / 30).

Where it fits: a model-backed reward scored by the reward runtime on decoded uint8 images.

score = 100 * cos(image_embed, text_embed) / 30, i.e. CLIP's `logits_per_image` diagonal at
the fixed logit scale 100 divided by 30 (Flow-GRPO `flow_grpo/clip_scorer.py`). Typical
matched pairs give cos ~0.25-0.35, so scores ~0.8-1.2; range [-3.33, 3.33].
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from genalign.models.config import ComputeDtype
from genalign.rewards.clip_encoder import ClipEncoder
from genalign.rewards.model_sizes import DeviceModel
from genalign.rewards.options import parse_options

CLIP_LOGIT_SCALE = 100.0
FLOW_GRPO_DIVISOR = 30.0


@dataclass
class ClipScoreOptions:
    model_name: str = "openai/clip-vit-large-patch14"
    """Hub id or local directory of a transformers `CLIPModel`."""
    processor_name: str | None = None
    """Where the tokenizer and preprocessor_config.json live; None: same as model_name."""
    dtype: ComputeDtype = "float32"

    def device_models(self, reward: str) -> tuple[DeviceModel, ...]:
        """Models on the scorer's device (the memory plan counts them): the whole CLIPModel."""
        return (DeviceModel("model_name", self.model_name, self.dtype, "CLIPModel"),)


def clip_score(image_embeds: torch.Tensor, text_embeds: torch.Tensor) -> torch.Tensor:
    """L2-normalised [B, D] x [B, D] -> [B]: 100 * cos / 30."""
    cosine = (image_embeds * text_embeds).sum(-1)  # [B]
    return CLIP_LOGIT_SCALE * cosine / FLOW_GRPO_DIVISOR


class ClipScoreReward:
    name = "clip_score"
    differentiable = True

    def __init__(self, device: str = "cpu", **kwargs: Any):
        self.options = parse_options(self.name, ClipScoreOptions, kwargs)
        self.device = device
        opts = self.options
        self.encoder = ClipEncoder.from_options(opts, device, self.name)

    def score(self, images: torch.Tensor, prompts: list[str], metadata: list[dict[str, Any]]) -> torch.Tensor:
        scores = clip_score(self.encoder.image_embeds(images), self.encoder.text_embeds(prompts))  # [B]
        return scores.float().cpu()

    def score_pixels(self, pixels: torch.Tensor, prompts: list[str], metadata: list[dict[str, Any]]) -> torch.Tensor:
        """`score` on float pixels in [0, 1], differentiable in them (reward feedback)."""
        return clip_score(self.encoder.pixel_embeds(pixels), self.encoder.text_embeds(prompts))  # [B]

    def offload(self) -> None:
        self.encoder.offload()

    def onload(self) -> None:
        self.encoder.onload()
