"""Z-Image (Tongyi-MAI/Z-Image-Turbo and the base Tongyi-MAI/Z-Image) behind the `FlowPolicy` protocol.

Where it fits: as `flux/policy.py` — `velocity` for rollout and replay, `decode` for rewards.
Loading is `ZImagePipeline.from_pretrained` (hub id or `save_pretrained` directory); prompts go
through the pipeline's own `encode_prompt` (Qwen3's second-to-last hidden state of the
chat-templated prompt, its padding tokens dropped).

Z-Image specifics, each checked against ZImagePipeline on the tiny model
(tests/integration/test_z_image_policy.py):
- The transformer is single-stream (S3-DiT): text and image tokens run through every block
  together. It takes Python lists: one latent [C, 1, h, w] and one prompt embedding [l_i, D]
  per sample, each prompt only its real tokens. We store a step's prompts padded to their
  longest with a mask (`Condition.mask`), as Qwen-Image does, and hand each sample its
  unpadded rows, so the transformer sees exactly what the pipeline gives it.
- Latents are stored as they are sampled, [C, h, w]; the transformer patchifies itself.
- Its timestep input is 1 − σ ((1000 − 1000σ)/1000, the pipeline's arithmetic), and its output
  is the negated velocity: v̂ = −out.
- CFG is the pipeline's `v_c + g (v_c − v_u)` with `guidance_scale` g = 0 meaning off (Turbo).
  That is genalign's `v_u + w (v_c − v_u)` with w = g + 1, so `rollout.guidance_scale` is the
  pipeline's guidance_scale plus one (the base model card's g = 4 is w = 5; Turbo's g = 0 is
  w = 1, off). The pipeline's optional `cfg_normalization` and `cfg_truncation` are off by
  default there and in both reference recipes, and not offered.
- The schedule is the pipeline's: linspace(1, 1/N, N) through the checkpoint's scheduler
  config (a static shift: Turbo 3.0, base 6.0).
- The VAE is FLUX.1's AutoencoderKL (`latents / scaling + shift` to decode).
"""

from __future__ import annotations

import torch

from genalign.models.base import Condition, compute_precision
from genalign.models.diffusers_common import (
    KLVAEImages,
    PipelineLoading,
    cfg_velocity,
    check_image_size,
    masked_pair,
    pad_tokens,
    scheduler_sigmas,
)
from genalign.models.spec import FamilySpec

Z_IMAGE_REPEATED_BLOCKS = ("ZImageTransformerBlock",)
"""The single-stream blocks (main layers and both refiners): units of regional compilation."""
Z_IMAGE_LORA_TARGETS = [
    "attention.to_q",
    "attention.to_k",
    "attention.to_v",
    "attention.to_out.0",
    "feed_forward.w1",
    "feed_forward.w2",
    "feed_forward.w3",
]
"""Flow-Factory's Z-Image targets (a0b2bc5, `src/flow_factory/models/z_image/z_image.py`
`default_target_modules`): every attention projection and the SwiGLU feed-forward of every
block, the noise and context refiners included."""

SPEC = FamilySpec(
    name="z_image",
    policy="genalign.models.z_image.policy:ZImagePolicy",
    package="genalign.models.z_image",
    pipeline_class="ZImagePipeline",
    negative_prompt=True,
    differentiable_decode=True,
    tiny_builder="genalign.models.z_image.tiny:build_tiny_z_image_pipeline",
    tiny_variants=(("Tongyi-MAI/Z-Image", "genalign.models.z_image.tiny:build_tiny_z_image_base_pipeline"),),
)
"""Z-Image: 16 pixels per transformer token (VAE 8 x patch 2); CFG's negative is
model.negative_prompt (the pipeline's default: empty)."""


def pipeline_timestep(sigma: torch.Tensor) -> torch.Tensor:
    """The transformer's timestep input [B] for σ [B]: (1000 − 1000σ)/1000 in float32, as
    ZImagePipeline computes it from the scheduler's timestep 1000σ."""
    timestep = sigma.to(torch.float32) * 1000.0  # [B] the scheduler's timesteps
    return (1000.0 - timestep) / 1000.0  # [B]


def real_tokens(embeds: torch.Tensor, mask: torch.Tensor) -> list[torch.Tensor]:
    """embeds [B, L, D] padded with mask [B, L] -> the B unpadded prompts [l_b, D] the transformer
    takes (the pipeline drops each prompt's padding the same way)."""
    return [row[keep.bool()] for row, keep in zip(embeds, mask)]


class ZImagePolicy(KLVAEImages, PipelineLoading):
    """Z-Image: the single-stream DiT is the denoiser; Qwen3 encodes; FLUX.1's VAE decodes."""

    spec = SPEC
    family = SPEC.name
    display_name = "Z-Image"
    diffusers_pipeline = SPEC.pipeline_class
    config_options = ("negative_prompt",)
    lora_target_modules = Z_IMAGE_LORA_TARGETS
    repeated_blocks = Z_IMAGE_REPEATED_BLOCKS

    def __init__(
        self,
        pipeline,
        device: torch.device,
        dtype: torch.dtype,
        max_sequence_length: int = 512,
        cfg_batch: str = "joint",
        negative_prompt: str = "",
    ):
        self._adopt(pipeline, device, dtype, max_sequence_length, cfg_batch, self.display_name)
        self.negative_prompt = negative_prompt
        self.vae_scale_factor = int(pipeline.vae_scale_factor)
        self.latent_channels = int(self.transformer.config.in_channels)

    def _encode(self, prompts: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
        """The pipeline's `encode_prompt` (one list entry per prompt, its real tokens only) padded
        with zeros to the longest: embeds [B, l, D], mask [B, l] int64 (1 = a real token)."""
        embeds, _ = self.pipeline.encode_prompt(
            prompt=list(prompts),
            device=self.device,
            do_classifier_free_guidance=False,
            max_sequence_length=self.max_sequence_length,
        )
        length = max(row.shape[0] for row in embeds)
        mask = torch.stack([torch.arange(length, device=self.device) < row.shape[0] for row in embeds]).long()
        return torch.stack([pad_tokens(row[None], length)[0] for row in embeds]), mask  # [B, l, D], [B, l]

    @torch.no_grad()
    def encode_prompts(self, prompts: list[str], with_negative: bool) -> Condition:
        """Qwen3 embeddings [B, L, D] with their mask, L the longest of these prompts (and of the
        negative, model.negative_prompt, so both CFG branches share one shape)."""
        embeds, mask = self._encode(prompts)
        if not with_negative:
            return Condition(embeds=embeds, mask=mask)
        return masked_pair(embeds, mask, *self._encode([self.negative_prompt] * len(prompts)))

    def velocity(
        self,
        latents: torch.Tensor,
        sigma: torch.Tensor,
        cond: Condition,
        guidance_scale: float,
        detach_uncond: bool = False,
    ) -> torch.Tensor:
        """v̂ [B, C, h, w] float32 at sigma [B]: each sample's latent and unpadded prompt through
        the transformer at timestep 1 − σ, negated; CFG v_u + w(v_c − v_u) when w > 1."""
        device, dtype, transformer = self.device, self.dtype, self.transformer

        def forward(hidden_states, timestep, embeds, mask) -> torch.Tensor:
            samples = list(hidden_states.to(device, dtype).unsqueeze(2).unbind(0))  # B x [C, 1, h, w]
            prompts = real_tokens(embeds.to(device, dtype), mask.to(device))  # B x [l_b, D]
            with compute_precision(device, dtype):
                out = transformer(samples, timestep, prompts, return_dict=False)[0]  # B x [C, 1, h, w]
            return -torch.stack([sample.float() for sample in out]).squeeze(2)  # [B, C, h, w]

        branch = dict(
            hidden_states=latents, timestep=pipeline_timestep(sigma.to(device)).expand(latents.shape[0])
        )  # [B, C, h, w], [B]
        return cfg_velocity(
            forward,
            dict(branch, embeds=cond.embeds, mask=cond.mask),
            dict(branch, embeds=cond.negative_embeds, mask=cond.negative_mask),
            guidance_scale,
            detach_uncond,
            self.cfg_batch,
        )

    def latent_shape(self, height: int, width: int) -> tuple[int, int, int]:
        check_image_size(height, width, self.vae_scale_factor * 2, self.display_name)
        return (self.latent_channels, height // self.vae_scale_factor, width // self.vae_scale_factor)

    def sigmas(self, num_steps: int, latent_shape: tuple[int, ...]) -> torch.Tensor:
        """The pipeline's schedule: its scheduler config over (h/2)(w/2) image tokens (Z-Image
        ships a static shift, so the token count does not move it)."""
        return scheduler_sigmas(self.pipeline.scheduler.config, num_steps, latent_shape[-2] * latent_shape[-1] // 4)
