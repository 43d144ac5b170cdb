"""A model family defined outside the genalign package, as a user would write one: one module
holding a policy class and its `FamilySpec`, selected with

    model.family=user_family:SPEC  model.allow_import=[user_family:SPEC]  model.path=random

(tests/ is on sys.path in the test session). It is a pixel-space SD3 transformer of one block
with random weights and a hashed prompt embedding: small enough to train two steps on a CPU,
and a different architecture from every shipped family (patch 2, no VAE, no text encoder).
"""

from __future__ import annotations

import hashlib

import torch

from genalign.models.base import Condition, resolve_device, resolve_dtype
from genalign.models.config import ModelConfig
from genalign.models.sd3 import sd3_transformer_velocity
from genalign.models.spec import FamilySpec
from genalign.sampling.schedules import flow_match_sigmas

SPEC = FamilySpec(
    name="pixel_sd3",
    policy="user_family:PixelSD3Policy",
    size_multiple=8,
    text_encoders=False,
    draws_text=False,
    export="none",
    hub_weights=False,
    builtin_path="random",
)
"""Pixel space at any multiple of 8 up to 32 (the transformer's position table), weights
built from a seed (model.path=random), no exporter outside genalign."""

EMBED_DIM = 8
SIDE = 32


def prompt_embedding(prompt: str) -> torch.Tensor:
    """A fixed random [2, EMBED_DIM] embedding per prompt (seeded by its hash; "" is zeros)."""
    if not prompt:
        return torch.zeros(2, EMBED_DIM)
    seed = int.from_bytes(hashlib.sha256(prompt.encode()).digest()[:4], "little")
    return torch.randn(2, EMBED_DIM, generator=torch.Generator().manual_seed(seed))


class PixelSD3Policy:
    """One-block SD3 transformer on [3, H, W] pixels in [-1, 1]."""

    spec = SPEC
    family = SPEC.name
    lora_target_modules = ["attn.to_q", "attn.to_k", "attn.to_v", "attn.to_out.0"]
    repeated_blocks = ("JointTransformerBlock",)

    def __init__(self, transformer: torch.nn.Module, device: torch.device, dtype: torch.dtype):
        self.device, self.dtype = device, dtype
        self.transformer = transformer.to(device=device, dtype=dtype).requires_grad_(False)

    @classmethod
    def from_config(cls, cfg: ModelConfig) -> "PixelSD3Policy":
        from diffusers import SD3Transformer2DModel

        if cfg.path != SPEC.builtin_path:
            raise ValueError(
                f"model.path={cfg.path!r}: model.family={SPEC.name} builds random weights; "
                f"set model.path={SPEC.builtin_path}"
            )
        with torch.random.fork_rng():
            torch.manual_seed(0)
            transformer = SD3Transformer2DModel(
                sample_size=SIDE,
                patch_size=2,
                in_channels=3,
                out_channels=3,
                num_layers=1,
                attention_head_dim=8,
                num_attention_heads=2,
                joint_attention_dim=EMBED_DIM,
                caption_projection_dim=16,
                pooled_projection_dim=EMBED_DIM,
                pos_embed_max_size=SIDE // 2,
            )
        return cls(transformer, resolve_device(cfg.device), resolve_dtype(cfg.dtype))

    def encode_prompts(self, prompts: list[str], with_negative: bool) -> Condition:
        embeds = torch.stack([prompt_embedding(p) for p in prompts]).to(self.device)  # [B, 2, E]
        pooled = embeds.mean(1)  # [B, E]
        if not with_negative:
            return Condition(embeds=embeds, pooled=pooled)
        return Condition(
            embeds=embeds,
            pooled=pooled,
            negative_embeds=torch.zeros_like(embeds),
            negative_pooled=torch.zeros_like(pooled),
        )

    def velocity(
        self,
        latents: torch.Tensor,
        sigma: torch.Tensor,
        cond: Condition,
        guidance_scale: float,
        detach_uncond: bool = False,
    ) -> torch.Tensor:
        return sd3_transformer_velocity(
            self.transformer, latents, sigma, cond, guidance_scale, self.device, self.dtype, detach_uncond
        )

    @torch.no_grad()
    def decode(self, latents: torch.Tensor) -> torch.Tensor:
        return ((latents.detach().float().cpu().clamp(-1, 1) + 1) * 127.5).round().to(torch.uint8)  # [B, 3, H, W]

    def encode_images(self, images: torch.Tensor) -> torch.Tensor:
        return images.to(self.device, torch.float32) / 127.5 - 1.0

    def latent_shape(self, height: int, width: int) -> tuple[int, int, int]:
        return (3, height, width)

    def sigmas(self, num_steps: int, latent_shape: tuple[int, ...]) -> torch.Tensor:
        return flow_match_sigmas(num_steps, shift=1.0)
