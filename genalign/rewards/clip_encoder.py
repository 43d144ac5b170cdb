"""A CLIP model, its tokenizer and its torch image transform, held on one device.

Where it fits: the shared part of the CLIP-backed scorers (clip_score, pickscore, aesthetic).
Each scorer owns one `ClipEncoder` and turns its L2-normalised embeddings into a score; the
encoder owns loading (hub id or local path, clear error when missing), preprocessing (torch,
from the processor config unless the scorer's reference preprocesses otherwise) and device
moves (offload/onload).
"""

from __future__ import annotations

from typing import Any

import torch

from genalign.rewards.image_transform import ImageTransform
from genalign.rewards.pretrained import load_pretrained, resolve_dtype


class ClipEncoder:
    """`CLIPModel` + transform (+ tokenizer unless `text=False`, for image-only scorers).

    The full `CLIPModel` is loaded even for image-only use: `CLIPVisionModelWithProjection`
    reads its projection size from `vision_config`, which some CLIP checkpoints leave at the
    default and then fail to load; the text tower costs memory, not time."""

    def __init__(
        self,
        model_name: str,
        processor_name: str,
        device: str,
        dtype: torch.dtype,
        *,
        reward: str,
        text: bool = True,
        model=None,
        transform: ImageTransform | None = None,
    ):
        """`model`: an already built `CLIPModel` to use instead of loading `model_name` (a
        checkpoint in another layout, converted by the scorer, e.g. HPS). `transform`: the
        scorer's reference preprocessing when it is not transformers' `CLIPImageProcessor` of
        `processor_name` (HPSv2's letterbox, open_clip's crop rounding)."""
        from transformers import AutoTokenizer, CLIPModel

        self.device = torch.device(device)
        self.dtype = dtype
        if model is None:
            model = (
                load_pretrained(
                    CLIPModel.from_pretrained,
                    model_name,
                    reward=reward,
                    key="model_name",
                    what="CLIPModel",
                    dtype=dtype,
                )
                .eval()
                .requires_grad_(False)
            )
        self.model = model
        self.model.to(self.device)
        self.transform = transform or ImageTransform.from_pretrained(
            processor_name, reward=reward, key="processor_name"
        )
        self.tokenizer = None
        if text:
            self.tokenizer = load_pretrained(
                AutoTokenizer.from_pretrained, processor_name, reward=reward, key="processor_name", what="tokenizer"
            )
            self.max_text_tokens = self.model.config.text_config.max_position_embeddings

    @classmethod
    def from_options(cls, options: Any, device: str, reward: str, text: bool = True) -> "ClipEncoder":
        """The encoder a CLIP scorer's options name (`model_name`, `processor_name` or the model's
        own, `dtype`), its errors naming `reward.kwargs.<reward>`."""
        return cls(
            options.model_name,
            options.processor_name or options.model_name,
            device,
            resolve_dtype(reward, options.dtype),
            reward=reward,
            text=text,
        )

    @torch.no_grad()
    def image_embeds(self, images: torch.Tensor) -> torch.Tensor:
        """uint8 [B, 3, H, W] -> float32 [B, D], L2-normalised projected image embeddings."""
        return self._embed(self.transform(images.to(self.device)))

    def pixel_embeds(self, pixels: torch.Tensor) -> torch.Tensor:
        """Float pixels [B, 3, H, W] in [0, 1] -> float32 [B, D] as `image_embeds`, differentiable
        in the pixels (`ImageTransform.differentiable`; the CLIP weights stay frozen)."""
        return self._embed(self.transform.differentiable(pixels.to(self.device)))

    def _embed(self, pixel_values: torch.Tensor) -> torch.Tensor:
        """Normalised model inputs [B, 3, h, w] -> L2-normalised projected embeddings [B, D]."""
        embeds = _as_tensor(self.model.get_image_features(pixel_values=pixel_values.to(self.dtype)))  # [B, D]
        return torch.nn.functional.normalize(embeds.float(), dim=-1)

    @torch.no_grad()
    def text_embeds(self, texts: list[str]) -> torch.Tensor:
        """strings -> float32 [B, D], L2-normalised projected text embeddings (truncated to the context)."""
        if self.tokenizer is None:
            raise RuntimeError("this ClipEncoder was built without its text tower (text=False)")
        tokens = self.tokenizer(
            texts, padding=True, truncation=True, max_length=self.max_text_tokens, return_tensors="pt"
        ).to(self.device)
        embeds = _as_tensor(
            self.model.get_text_features(input_ids=tokens["input_ids"], attention_mask=tokens["attention_mask"])
        )  # [B, D]
        return torch.nn.functional.normalize(embeds.float(), dim=-1)

    def offload(self) -> None:
        self.model.to("cpu")

    def onload(self) -> None:
        self.model.to(self.device)


def _as_tensor(features) -> torch.Tensor:
    """`get_*_features` returns a tensor, or (newer transformers) an output whose pooler_output is it."""
    if isinstance(features, torch.Tensor):
        return features
    return features.pooler_output
