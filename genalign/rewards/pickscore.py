"""PickScore reward: a CLIP-H fine-tuned on human preferences (Pick-a-Pic), /26 as Flow-GRPO trains.

Where it fits: a model-backed reward scored by the reward runtime on decoded uint8 images.

score = logit_scale.exp() * cos(image_embed, text_embed) / 26, with the model's own learned
logit scale (Flow-GRPO `flow_grpo/pickscore_scorer.py`). Papers report the raw value
(~21-24 for good images), so training scores sit around 0.8-0.93. The model
(`yuvalkirstain/PickScore_v1`) ships no processor; the tokenizer and preprocessing come from
`laion/CLIP-ViT-H-14-laion2B-s32B-b79K`, as upstream does.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from genalign.models.config import ComputeDtype
from genalign.rewards.clip_encoder import ClipEncoder
from genalign.rewards.model_sizes import DeviceModel
from genalign.rewards.options import parse_options
from genalign.rewards.pretrained import resolve_dtype

FLOW_GRPO_DIVISOR = 26.0


@dataclass
class PickScoreOptions:
    model_name: str = "yuvalkirstain/PickScore_v1"
    """Hub id or local directory of the PickScore `CLIPModel`."""
    processor_name: str = "laion/CLIP-ViT-H-14-laion2B-s32B-b79K"
    """Hub id or local directory with the tokenizer and preprocessor_config.json."""
    dtype: ComputeDtype = "float32"

    def device_models(self, reward: str) -> tuple[DeviceModel, ...]:
        """Models on the scorer's device (the memory plan counts them): the whole CLIPModel."""
        return (DeviceModel("model_name", self.model_name, self.dtype, "CLIPModel"),)


def pickscore(image_embeds: torch.Tensor, text_embeds: torch.Tensor, logit_scale: torch.Tensor) -> torch.Tensor:
    """L2-normalised [B, D] x [B, D], log-scale scalar -> [B]: exp(logit_scale) * cos / 26."""
    cosine = (image_embeds * text_embeds).sum(-1)  # [B]
    return logit_scale.exp().float() * cosine / FLOW_GRPO_DIVISOR


class PickScoreReward:
    name = "pickscore"
    differentiable = True

    def __init__(self, device: str = "cpu", **kwargs: Any):
        self.options = parse_options(self.name, PickScoreOptions, kwargs)
        self.device = device
        opts = self.options
        self.encoder = ClipEncoder(
            opts.model_name, opts.processor_name, device, resolve_dtype(self.name, opts.dtype), reward=self.name
        )

    def score(self, images: torch.Tensor, prompts: list[str], metadata: list[dict[str, Any]]) -> torch.Tensor:
        image_embeds = self.encoder.image_embeds(images)  # [B, D]
        text_embeds = self.encoder.text_embeds(prompts)  # [B, D]
        return pickscore(image_embeds, text_embeds, self.encoder.model.logit_scale.detach()).float().cpu()

    def score_pixels(self, pixels: torch.Tensor, prompts: list[str], metadata: list[dict[str, Any]]) -> torch.Tensor:
        """`score` on float pixels in [0, 1], differentiable in them (reward feedback)."""
        image_embeds = self.encoder.pixel_embeds(pixels)  # [B, D]
        return pickscore(image_embeds, self.encoder.text_embeds(prompts), self.encoder.model.logit_scale.detach())

    def offload(self) -> None:
        self.encoder.offload()

    def onload(self) -> None:
        self.encoder.onload()
