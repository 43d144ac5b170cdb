"""Image similarity: how much of its source image an edit keeps, as CLIP sees it.

Where it fits: an editing reward (`needs_source`), scored by the reward runtime on decoded
uint8 results beside the source images their prompts edit (data/source_images.py; they ride in
each sample's metadata). Flow-GRPO's FLUX.1 Kontext recipe (config/grpo.py
`counting_flux_kontext`: `image_similarity` 0.5 beside GenEval 0.5) weighs such a consistency
term against an instruction-following one, so an edit neither ignores the instruction nor
repaints the whole picture.

score = cos(CLIP(result), CLIP(source)) in [-1, 1]: the L2-normalised projected image
embeddings of one CLIP model (the ViT-L/14 Flow-GRPO's CLIP scorers load), averaged over the
prompt's source images when it has several. Flow-GRPO's own scorer file for this term was not
in the stored copies of its repository, so the plain cosine here is what its name and the
shared CLIP image path compute, not a transcription; a weight in reward.components rescales it.
"""

from __future__ import annotations

from typing import Any

import torch

from genalign.rewards.base import RewardError, source_images
from genalign.rewards.clip_encoder import ClipEncoder
from genalign.rewards.clip_score import ClipScoreOptions
from genalign.rewards.options import parse_options


class ImageSimilarityOptions(ClipScoreOptions):
    """clip_score's options (`model_name`, `processor_name`, `dtype`; the memory plan counts the
    whole CLIPModel): the same CLIP, of which only the image tower is used."""


def source_similarity(result_embeds: torch.Tensor, source_embeds: torch.Tensor) -> torch.Tensor:
    """L2-normalised result embeddings [B, D] and source embeddings [B, S, D] -> [B]: the cosine
    of each result with each of its sources, averaged over the S sources."""
    return (result_embeds[:, None, :] * source_embeds).sum(-1).mean(-1)  # [B, S] -> [B]


class ImageSimilarityReward:
    name = "image_similarity"
    needs_source = True

    def __init__(self, device: str = "cpu", **kwargs: Any):
        self.options = parse_options(self.name, ImageSimilarityOptions, kwargs)
        opts = self.options
        self.encoder = ClipEncoder.from_options(opts, device, self.name, text=False)

    def score(self, images: torch.Tensor, prompts: list[str], metadata: list[dict[str, Any]]) -> torch.Tensor:
        sources = source_images(metadata)  # [B, S, 3, H, W] uint8
        if sources is None:
            raise RewardError(
                f"{self.name}: the prompts carry no source image (first prompt {prompts[0]!r}); "
                "it scores edits, whose manifest rows name a source_image"
            )
        batch, count = sources.shape[:2]
        source_embeds = self.encoder.image_embeds(sources.flatten(0, 1)).view(batch, count, -1)  # [B, S, D]
        return source_similarity(self.encoder.image_embeds(images), source_embeds).float().cpu()  # [B]

    def offload(self) -> None:
        self.encoder.offload()

    def onload(self) -> None:
        self.encoder.onload()
