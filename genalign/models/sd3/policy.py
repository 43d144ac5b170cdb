"""Stable Diffusion 3 / 3.5 behind the `FlowPolicy` protocol.

Where it fits: the collector samples with `velocity` + the SDE kernels, replay calls the
same `velocity` with gradients, rewards see `decode`d uint8 images. Loading goes through the
real diffusers classes (`StableDiffusion3Pipeline.from_pretrained` on a hub id or a local
`save_pretrained` directory); prompt encoding is the pipeline's own `encode_prompt`
(two CLIP towers + T5), so embeddings match what diffusers would produce.

SD3 specifics: the transformer's timestep input is 1000·σ; CFG is true classifier-free
guidance with the empty prompt as the negative, run as one batch [uncond, cond] (the same
call in rollout and replay, docs/algorithms.md §2.7); the VAE decodes
`latents / scaling_factor + shift_factor` and always runs in float32. Text encoders and the
VAE are frozen; only the transformer is ever trained (LoRA or full, `weights/lora.py`).
"""

from __future__ import annotations

import logging

import torch

from genalign.models.base import Condition, compute_precision
from genalign.models.diffusers_common import (
    KLVAEImages,
    PipelineLoading,
    cfg_velocity,
    check_image_size,
)
from genalign.models.spec import FamilySpec
from genalign.sampling.schedules import flow_match_sigmas

log = logging.getLogger(__name__)

SD3_REPEATED_BLOCKS = ("JointTransformerBlock",)
"""The transformer's repeated block: the unit of regional compilation (`model.compile_mode`)."""
SD3_LORA_TARGETS = [
    "attn.to_q",
    "attn.to_k",
    "attn.to_v",
    "attn.to_out.0",
    "attn.add_q_proj",
    "attn.add_k_proj",
    "attn.add_v_proj",
    "attn.to_add_out",
]
"""Flow-GRPO's SD3.5 targets (docs/algorithms.md §2.8): every joint-attention projection."""
_TEXT_ENCODERS = ("text_encoder", "text_encoder_2", "text_encoder_3")
_TOKENIZERS = ("tokenizer", "tokenizer_2", "tokenizer_3")


def sd3_transformer_velocity(
    transformer: torch.nn.Module,
    latents: torch.Tensor,
    sigma: torch.Tensor,
    cond: Condition,
    guidance_scale: float,
    device: torch.device,
    dtype: torch.dtype,
    detach_uncond: bool = False,
    cfg_batch: str = "joint",
) -> torch.Tensor:
    """Velocity of an `SD3Transformer2DModel` (SD3, and the toy family that reuses the class):
    timestep = 1000·σ (σ [B] or a scalar, broadcast); guidance_scale > 1 returns
    v_u + w (v_c − v_u), with v_u detached when `detach_uncond`. `cfg_batch="joint"` runs one
    forward over [uncond, cond]; "split" runs two, the unconditional one without autograd
    when `detach_uncond` (model.cfg_batch). The transformer runs under `compute_precision`
    (autocast to `dtype`). Float32 out."""

    def forward(
        hidden_states: torch.Tensor, timestep: torch.Tensor, embeds: torch.Tensor, pooled: torch.Tensor
    ) -> torch.Tensor:
        with compute_precision(device, dtype):
            out = transformer(
                hidden_states=hidden_states.to(device, dtype),
                timestep=timestep,
                encoder_hidden_states=embeds.to(device, dtype),
                pooled_projections=pooled.to(device, dtype),
                return_dict=False,
            )[0]
        return out.float()  # [B, C, h, w]

    timestep = (sigma.to(device, torch.float32) * 1000.0).expand(latents.shape[0])  # [B]
    branch = dict(hidden_states=latents, timestep=timestep)
    return cfg_velocity(
        forward,
        dict(branch, embeds=cond.embeds, pooled=cond.pooled),
        dict(branch, embeds=cond.negative_embeds, pooled=cond.negative_pooled),
        guidance_scale,
        detach_uncond,
        cfg_batch,
    )


SPEC = FamilySpec(
    name="sd3",
    policy="genalign.models.sd3.policy:SD3Policy",
    package="genalign.models.sd3",
    pipeline_class="StableDiffusion3Pipeline",
    differentiable_decode=True,
    tiny_builder="genalign.models.sd3.tiny:build_tiny_sd3_pipeline",
)
"""Stable Diffusion 3 / 3.5: 16 pixels per latent patch (VAE 8 x patch 2), empty-prompt CFG."""


class SD3Policy(KLVAEImages, PipelineLoading):
    """SD3/SD3.5: the transformer is the denoiser; CLIP-L/G + T5 encode; the VAE decodes."""

    spec = SPEC
    family = SPEC.name
    display_name = "SD3"
    diffusers_pipeline = SPEC.pipeline_class
    lora_target_modules = SD3_LORA_TARGETS
    text_encoder_names = _TEXT_ENCODERS
    tokenizer_names = _TOKENIZERS
    repeated_blocks = SD3_REPEATED_BLOCKS

    def __init__(
        self,
        pipeline,
        device: torch.device,
        dtype: torch.dtype,
        max_sequence_length: int = 128,
        cfg_batch: str = "joint",
    ):
        self._adopt(pipeline, device, dtype, max_sequence_length, cfg_batch, self.display_name)
        self.scheduler_shift = float(pipeline.scheduler.config.get("shift", 1.0))
        self.vae_scale_factor = 2 ** (len(self.vae.config.block_out_channels) - 1)
        self.patch_size = int(self.transformer.config.patch_size)

    @torch.no_grad()
    def encode_prompts(self, prompts: list[str], with_negative: bool) -> Condition:
        """The pipeline's `encode_prompt` (CLIP-L + CLIP-G + T5); the negative is the empty
        prompt. embeds [B, 77 + max_sequence_length, D_joint], pooled [B, P]."""
        embeds, negative, pooled, negative_pooled = self.pipeline.encode_prompt(
            prompt=list(prompts),
            prompt_2=None,
            prompt_3=None,
            device=self.device,
            num_images_per_prompt=1,
            do_classifier_free_guidance=with_negative,
            negative_prompt=[""] * len(prompts) if with_negative else None,
            max_sequence_length=self.max_sequence_length,
        )
        if not with_negative:
            return Condition(embeds=embeds, pooled=pooled)
        return Condition(embeds=embeds, pooled=pooled, negative_embeds=negative, negative_pooled=negative_pooled)

    def velocity(
        self,
        latents: torch.Tensor,
        sigma: torch.Tensor,
        cond: Condition,
        guidance_scale: float,
        detach_uncond: bool = False,
    ) -> torch.Tensor:
        """v̂ [B, C, h, w] float32 at sigma [B] (see `sd3_transformer_velocity`)."""
        return sd3_transformer_velocity(
            self.transformer,
            latents,
            sigma,
            cond,
            guidance_scale,
            self.device,
            self.dtype,
            detach_uncond,
            self.cfg_batch,
        )

    def latent_shape(self, height: int, width: int) -> tuple[int, int, int]:
        check_image_size(height, width, self.vae_scale_factor * self.patch_size, "SD3")
        return (int(self.vae.config.latent_channels), height // self.vae_scale_factor, width // self.vae_scale_factor)

    def sigmas(self, num_steps: int, latent_shape: tuple[int, ...]) -> torch.Tensor:
        """SD3's static shift, the same at every resolution."""
        return flow_match_sigmas(num_steps, shift=self.scheduler_shift)
