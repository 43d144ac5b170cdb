"""Stable Diffusion 3 / 3.5 behind the `FlowPolicy` protocol.

Where it fits: the collector samples with `velocity` + the SDE kernels, replay calls the
same `velocity` with gradients, rewards see `decode`d uint8 images. Loading goes through the
real diffusers classes (`StableDiffusion3Pipeline.from_pretrained` on a hub id or a local
`save_pretrained` directory); prompt encoding is the pipeline's own `encode_prompt`
(two CLIP towers + T5), so embeddings match what diffusers would produce.

SD3 specifics: the transformer's timestep input is 1000·σ; CFG is true classifier-free
guidance with the empty prompt as the negative, run as one batch [uncond, cond]; the VAE
decodes `latents / scaling_factor + shift_factor` and always runs in float32.
"""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path

import torch

from genalign.models.base import Condition, ModelConfig, resolve_device, resolve_dtype
from genalign.sampling.schedules import flow_match_sigmas

log = logging.getLogger(__name__)

SD3_LORA_TARGETS = ["attn.to_q", "attn.to_k", "attn.to_v", "attn.to_out.0",
                    "attn.add_q_proj", "attn.add_k_proj", "attn.add_v_proj", "attn.to_add_out"]
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


def check_model_path(path: str) -> None:
    """Fail before any hub call when `model.path` names a local directory that is missing."""
    if Path(path).expanduser().exists():
        return
    looks_local = path.startswith(("/", "./", "../", "~")) or not _HUB_ID.match(path)
    if looks_local:
        raise FileNotFoundError(f"model.path={path!r}: no such local directory (and it is not a hub id "
                                "of the form 'org/name')")


def load_pipeline(path: str, dtype: torch.dtype, revision: str | None = None):
    from diffusers import StableDiffusion3Pipeline

    check_model_path(path)
    try:
        return StableDiffusion3Pipeline.from_pretrained(path, dtype=dtype, revision=revision)
    except (OSError, ValueError) as exc:
        offline = os.environ.get("HF_HUB_OFFLINE", "0").lower() in ("1", "true", "yes")
        if Path(path).expanduser().exists():
            raise
        reason = "HF_HUB_OFFLINE is set and the weights are not in the local cache" if offline else \
            "the weights could not be fetched"
        raise FileNotFoundError(
            f"model.path={path!r}: {reason} (HF_HOME={os.environ.get('HF_HOME', '~/.cache/huggingface')}). "
            "Download them where you have access (`huggingface-cli download ...`) or point model.path at a "
            f"local save_pretrained directory. Original error: {exc}") from exc


class SD3Policy:
    family = "sd3"
    diffusers_pipeline = "StableDiffusion3Pipeline"
    """Pipeline class whose `load_lora_weights` loads our exported LoRA."""
    lora_target_modules = SD3_LORA_TARGETS

    def __init__(self, pipeline, device: torch.device, dtype: torch.dtype, max_sequence_length: int = 256):
        self.pipeline = pipeline
        self.device = device
        self.dtype = dtype
        self.max_sequence_length = max_sequence_length
        pipeline.vae.to(device=device, dtype=torch.float32)
        for name in ("text_encoder", "text_encoder_2", "text_encoder_3"):
            module = getattr(pipeline, name, None)
            if module is not None:
                module.to(device=device, dtype=dtype).requires_grad_(False).eval()
        pipeline.vae.requires_grad_(False).eval()
        self.transformer = pipeline.transformer.to(device=device, dtype=dtype)
        self.transformer.requires_grad_(False)
        self.scheduler_shift = float(pipeline.scheduler.config.get("shift", 1.0))
        self.vae_scale_factor = 2 ** (len(pipeline.vae.config.block_out_channels) - 1)
        for name in ("tokenizer", "tokenizer_2", "tokenizer_3"):
            tokenizer = getattr(pipeline, name, None)
            if tokenizer is not None and len(tokenizer) == 0:
                raise ValueError(f"{name} loaded empty (an offline load of a missing repo?)")

    @property
    def vae(self):
        return self.pipeline.vae

    @classmethod
    def from_config(cls, cfg: ModelConfig) -> "SD3Policy":
        return cls.from_pretrained(cfg.path, dtype=resolve_dtype(cfg.dtype), device=resolve_device(cfg.device),
                                   revision=cfg.revision, max_sequence_length=cfg.max_sequence_length)

    @classmethod
    def from_pretrained(cls, path: str, *, dtype: torch.dtype = torch.float32, device: str | torch.device = "cpu",
                        revision: str | None = None, max_sequence_length: int = 256) -> "SD3Policy":
        pipeline = load_pipeline(str(path), dtype, revision)
        return cls(pipeline, torch.device(device), dtype, max_sequence_length)

    @torch.no_grad()
    def encode_prompts(self, prompts: list[str], with_negative: bool) -> Condition:
        embeds, negative, pooled, negative_pooled = self.pipeline.encode_prompt(
            prompt=prompts, prompt_2=None, prompt_3=None, device=self.device, num_images_per_prompt=1,
            do_classifier_free_guidance=with_negative, negative_prompt=[""] * len(prompts) if with_negative else None,
            max_sequence_length=self.max_sequence_length)
        return Condition(embeds=embeds, pooled=pooled, negative_embeds=negative if with_negative else None,
                         negative_pooled=negative_pooled if with_negative else None)

    def velocity(self, latents: torch.Tensor, sigma: torch.Tensor, cond: Condition,
                 guidance_scale: float) -> torch.Tensor:
        timestep = sigma.to(self.device, torch.float32) * 1000.0  # [B] SD3 timestep = 1000·σ
        hidden = latents.to(self.device, self.dtype)
        if guidance_scale > 1.0:
            if cond.negative_embeds is None:
                raise ValueError("guidance_scale > 1 needs prompts encoded with_negative=True")
            prediction = self.transformer(
                hidden_states=torch.cat([hidden, hidden]),
                timestep=torch.cat([timestep, timestep]),
                encoder_hidden_states=torch.cat([cond.negative_embeds, cond.embeds]).to(self.dtype),
                pooled_projections=torch.cat([cond.negative_pooled, cond.pooled]).to(self.dtype),
                return_dict=False)[0].float()  # [2B, C, h, w]
            uncond, text = prediction.chunk(2)
            return uncond + guidance_scale * (text - uncond)  # [B, C, h, w]
        return self.transformer(hidden_states=hidden, timestep=timestep,
                                encoder_hidden_states=cond.embeds.to(self.dtype),
                                pooled_projections=cond.pooled.to(self.dtype), return_dict=False)[0].float()

    @torch.no_grad()
    def decode(self, latents: torch.Tensor) -> torch.Tensor:
        config = self.vae.config
        scaled = latents.to(self.device, torch.float32) / config.scaling_factor + config.shift_factor
        images = self.vae.decode(scaled, return_dict=False)[0]  # [B, 3, H, W] in [-1, 1]
        return ((images / 2 + 0.5).clamp(0, 1) * 255).round().to(torch.uint8).cpu()

    def latent_shape(self, height: int, width: int) -> tuple[int, int, int]:
        factor = self.vae_scale_factor
        if height % (factor * 2) or width % (factor * 2):
            raise ValueError(f"rollout.height/width must be multiples of {factor * 2} for SD3, got {height}x{width}")
        return (self.transformer.config.in_channels, height // factor, width // factor)

    def sigmas(self, num_steps: int) -> torch.Tensor:
        return flow_match_sigmas(num_steps, shift=self.scheduler_shift)
