"""FLUX.2 [klein] (4B, 9B, and their -base teachers) behind the `FlowPolicy` protocol.

This module is also where FLUX.2's shared code lives once: FLUX.2 [dev] (`models/flux2/`)
subclasses `Flux2KleinPolicy`, changing only the text encoder's pipeline, the guidance
embedding and the CFG rule (`check_cfg`).

Where it fits: as FLUX.1 (`models/flux/policy.py`) — the collector samples with `velocity` + the
SDE kernels, replay calls the same `velocity` with gradients, rewards see `decode`d uint8 images.
Loading is `Flux2KleinPipeline.from_pretrained`; prompts go through the pipeline's own
`encode_prompt` (Qwen3 under its chat template, thinking off, the hidden states of layers 9, 18
and 27 side by side: [B, L, 3·D]).

What differs from FLUX.1, each checked against Flux2KleinPipeline on the tiny model
(tests/integration/test_flux2_klein.py):
- The VAE (`AutoencoderKLFlux2`, 32 channels, factor 8) is followed by a 2x2 patchify and a
  per-channel normalisation by the VAE's own batch-norm statistics (`vae.bn` running mean and
  √(var + eps) over the 128 patchified channels). The pipeline samples in that normalised,
  patchified space. We store latents unpatchified, [32, H/8, W/8] per sample, so the SDE
  kernels, noise and decode see an image-shaped tensor; FLUX.1's 2x2 packing (`pack_2x2`) is
  exactly the pipeline's patchify + flatten, so the transformer sees the pipeline's tokens.
- Position ids have four axes (t, h, w, l): image tokens (0, row, col, 0), text tokens
  (0, 0, 0, index).
- The schedule is linspace(1, 1/N, N) shifted by FLUX.2's `empirical_shift_mu` (token count
  and step count), not FLUX.1's linear μ.
- No guidance embedding (klein is not guidance-distilled). The -base checkpoints take true CFG
  with the empty prompt as negative (the pipeline's guidance_scale > 1, rollout.guidance_scale
  here); the step-distilled 4B / 9B ignore it (`is_distilled`), so a run asking for it is refused.
"""

from __future__ import annotations

import torch

from genalign.models.base import Condition, compute_precision
from genalign.models.diffusers_common import (
    PackedLatents,
    PipelineLoading,
    images_to_uint8,
    pack_2x2,
    scheduler_sigmas,
    unpack_2x2,
)
from genalign.models.spec import FamilySpec
from genalign.sampling.schedules import empirical_shift_mu

FLUX2_REPEATED_BLOCKS = ("Flux2TransformerBlock", "Flux2SingleTransformerBlock")
"""The double-stream and single-stream blocks: units of regional compilation."""
FLUX2_LORA_TARGETS = [
    "attn.to_q",
    "attn.to_k",
    "attn.to_v",
    "attn.to_out.0",
    "attn.add_q_proj",
    "attn.add_k_proj",
    "attn.add_v_proj",
    "attn.to_add_out",
    "ff.linear_in",
    "ff.linear_out",
    "ff_context.linear_in",
    "ff_context.linear_out",
    "attn.to_qkv_mlp_proj",
]
"""Flow-Factory's FLUX.2 targets (models/flux/flux2_klein.py `default_target_modules`, commit
a0b2bc5): the double-stream blocks' attention projections and feed-forwards, and the
single-stream blocks' fused QKV + MLP input projection."""

SPEC = FamilySpec(
    name="flux2_klein",
    policy="genalign.models.flux2_klein.policy:Flux2KleinPolicy",
    package="genalign.models.flux2_klein",
    pipeline_class="Flux2KleinPipeline",
    differentiable_decode=True,
    tiny_builder="genalign.models.flux2_klein.tiny:build_tiny_flux2_klein_pipeline",
)
"""FLUX.2 [klein]: 16 pixels per token (VAE factor 8 x the 2x2 patchify), no guidance embedding."""


def flux2_position_ids(token_rows: int, token_cols: int, text_tokens: int, device: torch.device):
    """(image ids [rows·cols, 4], text ids [L, 4]) float32: image token (row, col) at
    (0, row, col, 0), row-major; text token l at (0, 0, 0, l) (Flux2KleinPipeline
    `_prepare_latent_ids` / `_prepare_text_ids`)."""
    rows = torch.arange(token_rows, device=device)[:, None].expand(token_rows, token_cols).reshape(-1)
    cols = torch.arange(token_cols, device=device)[None, :].expand(token_rows, token_cols).reshape(-1)
    zeros = torch.zeros_like(rows)
    image = torch.stack([zeros, rows, cols, zeros], dim=-1).float()  # [rows·cols, 4]
    index = torch.arange(text_tokens, device=device)
    text_zeros = torch.zeros_like(index)
    text = torch.stack([text_zeros, text_zeros, text_zeros, index], dim=-1).float()  # [L, 4]
    return image, text


def batch_norm_stats(vae: torch.nn.Module, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """(mean, std) [128] float32 of FLUX.2's latent normalisation: the VAE's batch-norm running
    mean and √(running_var + batch_norm_eps) over the patchified channels (4 x 32)."""
    mean = vae.bn.running_mean.to(device, torch.float32)
    std = torch.sqrt(vae.bn.running_var.to(device, torch.float32) + vae.config.batch_norm_eps)
    return mean, std


def normalised_to_vae(vae: torch.nn.Module, latents: torch.Tensor) -> torch.Tensor:
    """Stored latents [B, C, h, w] -> the VAE's own latents [B, C, h, w]: per patchified channel
    `x · std + mean` (the pipeline's decode), patchified and back with `pack_2x2`."""
    _, _, height, width = latents.shape
    mean, std = batch_norm_stats(vae, latents.device)
    tokens = pack_2x2(latents.float()) * std + mean  # [B, hw/4, 4C]
    return unpack_2x2(tokens, height, width)


def vae_to_normalised(vae: torch.nn.Module, latents: torch.Tensor) -> torch.Tensor:
    """The inverse of `normalised_to_vae`: `(z − mean) / std` per patchified channel (the
    pipeline's `_encode_vae_image`)."""
    _, _, height, width = latents.shape
    mean, std = batch_norm_stats(vae, latents.device)
    tokens = (pack_2x2(latents.float()) - mean) / std  # [B, hw/4, 4C]
    return unpack_2x2(tokens, height, width)


class Flux2KleinPolicy(PackedLatents, PipelineLoading):
    """FLUX.2 [klein]: the Flux2 MMDiT is the denoiser; Qwen3 encodes; the FLUX.2 VAE decodes."""

    spec = SPEC
    family = SPEC.name
    display_name = "FLUX.2 [klein]"
    diffusers_pipeline = SPEC.pipeline_class
    lora_target_modules = FLUX2_LORA_TARGETS
    repeated_blocks = FLUX2_REPEATED_BLOCKS

    def __init__(
        self,
        pipeline,
        device: torch.device,
        dtype: torch.dtype,
        max_sequence_length: int = 512,
        cfg_batch: str = "joint",
        embedded_guidance: float | None = None,
    ):
        self._adopt(pipeline, device, dtype, max_sequence_length, cfg_batch, self.display_name)
        self._adopt_packed(embedded_guidance, vae_scale_factor=2 ** (len(self.vae.config.block_out_channels) - 1))
        self.distilled = bool(pipeline.config.get("is_distilled", False))

    @torch.no_grad()
    def encode_prompts(self, prompts: list[str], with_negative: bool) -> Condition:
        """The pipeline's `encode_prompt`: embeds [B, max_sequence_length, 3·D] (Qwen3's layers
        9, 18, 27); the negative (true CFG only) is the empty prompt, as the pipeline's."""
        embeds = self._encode(prompts)
        if not with_negative:
            return Condition(embeds=embeds)
        return Condition(embeds=embeds, negative_embeds=self._encode([""] * len(prompts)))

    def _encode(self, prompts: list[str]) -> torch.Tensor:
        embeds, _ = self.pipeline.encode_prompt(
            prompt=list(prompts), device=self.device, max_sequence_length=self.max_sequence_length
        )
        return embeds  # [B, max_sequence_length, 3·D]

    def velocity(
        self,
        latents: torch.Tensor,
        sigma: torch.Tensor,
        cond: Condition,
        guidance_scale: float,
        detach_uncond: bool = False,
    ) -> torch.Tensor:
        """v̂ [B, C, h, w] float32 at sigma [B]: the pipeline's tokens through the transformer at
        timestep σ with the 4-axis ids; true CFG (v_u + w(v_c − v_u)) when guidance_scale > 1."""
        self.check_cfg(guidance_scale)
        _, _, height, width = latents.shape
        device, dtype, transformer = self.device, self.dtype, self.transformer
        img_ids, txt_ids = flux2_position_ids(height // 2, width // 2, cond.embeds.shape[1], device)

        def forward(hidden_states, timestep, embeds, guidance=None) -> torch.Tensor:
            with compute_precision(device, dtype):
                out = transformer(
                    hidden_states=hidden_states.to(device, dtype),
                    timestep=timestep.to(dtype),
                    guidance=guidance,
                    encoder_hidden_states=embeds.to(device, dtype),
                    txt_ids=txt_ids,
                    img_ids=img_ids,
                    return_dict=False,
                )[0]
            return out.float()  # [B, hw/4, 4C]

        return self.packed_velocity(
            forward,
            latents,
            sigma,
            dict(embeds=cond.embeds),
            dict(embeds=cond.negative_embeds),
            guidance_scale,
            detach_uncond,
        )

    def check_cfg(self, guidance_scale: float) -> None:
        """Refuse true CFG where the checkpoint's pipeline has none: the step-distilled klein."""
        if guidance_scale > 1 and self.distilled:
            raise ValueError(
                f"rollout.guidance_scale={guidance_scale}: this FLUX.2 [klein] checkpoint is step-distilled "
                "(model_index.json is_distilled: Flux2KleinPipeline ignores CFG); set rollout.guidance_scale=1, "
                "or train a -base checkpoint for true CFG"
            )

    def sigmas(self, num_steps: int, latent_shape: tuple[int, ...]) -> torch.Tensor:
        """The pipeline's schedule: linspace(1, 1/N, N) through its scheduler with FLUX.2's
        `empirical_shift_mu` of the (h/2)(w/2) tokens and N."""
        tokens = latent_shape[-2] * latent_shape[-1] // 4
        mu = empirical_shift_mu(tokens, num_steps)
        return scheduler_sigmas(self.pipeline.scheduler.config, num_steps, tokens, mu=mu)

    def _decode(self, latents: torch.Tensor) -> torch.Tensor:
        """The VAE's output [B, 3, H, W] in about [-1, 1] for stored latents [B, C, h, w]."""
        raw = normalised_to_vae(self.vae, latents.to(self.device))  # [B, C, h, w]
        return self.vae.decode(raw, return_dict=False)[0]

    @torch.no_grad()
    def decode(self, latents: torch.Tensor) -> torch.Tensor:
        """latents [B, C, h, w] -> uint8 [B, 3, h·f, w·f] on CPU (the pipeline's de-normalise,
        decode and postprocess)."""
        return images_to_uint8(self._decode(latents))

    def decode_pixels(self, latents: torch.Tensor) -> torch.Tensor:
        """latents [B, C, h, w] -> float [B, 3, h·f, w·f] in [0, 1] on the device, differentiable
        in the latents (reward feedback back-propagates through the frozen VAE)."""
        return (self._decode(latents) / 2 + 0.5).clamp(0, 1)

    @torch.no_grad()
    def encode_images(self, images: torch.Tensor) -> torch.Tensor:
        """uint8 [B, 3, H, W] -> stored latents [B, C, h, w] float32 that `decode` maps back: the
        posterior's mode (the pipeline's `sample_mode="argmax"`), normalised."""
        pixels = images.to(self.device, torch.float32) / 127.5 - 1.0  # [B, 3, H, W] in [-1, 1]
        return vae_to_normalised(self.vae, self.vae.encode(pixels).latent_dist.mode())
