"""FLUX.1 (dev, schnell) behind the `FlowPolicy` protocol.

Where it fits: as `sd3.py` — the collector samples with `velocity` + the SDE kernels, replay
calls the same `velocity` with gradients, rewards see `decode`d uint8 images. Loading is
`FluxPipeline.from_pretrained` (hub id or `save_pretrained` directory); prompts go through the
pipeline's own `encode_prompt` (CLIP-L pooled + T5 tokens).

FLUX specifics, each checked against FluxPipeline on the tiny model
(tests/integration/test_flux_policy.py):
- Latents are stored unpacked, [C, h, w] per sample (so the SDE kernels, noise and decode see
  an image-shaped tensor); `velocity` packs them into 2x2-patch tokens with their image ids
  (0, row, col) and unpacks the prediction. Text ids are zeros.
- The timestep input is σ itself (the transformer multiplies by 1000 inside).
- FLUX.1-dev is guidance-distilled: `model.embedded_guidance` (3.5) goes into the guidance
  embedding, and by default there is no true CFG (rollout.guidance_scale=1, Flow-GRPO's
  FLUX setting). rollout.guidance_scale > 1 adds FluxPipeline's true CFG with the empty
  prompt as negative (its `true_cfg_scale` with negative_prompt="").
- The schedule is the pipeline's: linspace(1, 1/N, N) shifted by μ(image tokens) (the
  scheduler's use_dynamic_shifting), so it depends on the resolution.
"""

from __future__ import annotations

import torch

from genalign.models.base import Condition, compute_precision
from genalign.models.diffusers_common import (
    KLVAEImages,
    PackedLatents,
    PipelineLoading,
)
from genalign.models.spec import FamilySpec

FLUX_REPEATED_BLOCKS = ("FluxTransformerBlock", "FluxSingleTransformerBlock")
"""The double-stream and single-stream blocks: units of regional compilation."""
FLUX_LORA_TARGETS = [
    "attn.to_q",
    "attn.to_k",
    "attn.to_v",
    "attn.to_out.0",
    "attn.add_q_proj",
    "attn.add_k_proj",
    "attn.add_v_proj",
    "attn.to_add_out",
    "ff.net.0.proj",
    "ff.net.2",
    "ff_context.net.0.proj",
    "ff_context.net.2",
]
"""Flow-GRPO's FLUX targets (scripts/train_flux.py): every attention projection and the
feed-forwards of the double-stream blocks; by suffix, attn.to_q/k/v also bind the single-stream
blocks (whose attention has no output projection of its own)."""
_TOKENIZERS = ("tokenizer", "tokenizer_2")
_TEXT_ENCODERS = ("text_encoder", "text_encoder_2")


def latent_image_ids(token_rows: int, token_cols: int, device: torch.device) -> torch.Tensor:
    """Position ids [rows·cols, 3] of the packed image tokens: (0, row, col), row-major
    (FluxPipeline `_prepare_latent_image_ids`)."""
    rows = torch.arange(token_rows, device=device, dtype=torch.float32)[:, None].expand(token_rows, token_cols)
    cols = torch.arange(token_cols, device=device, dtype=torch.float32)[None, :].expand(token_rows, token_cols)
    return torch.stack([torch.zeros_like(rows), rows, cols], dim=-1).reshape(-1, 3)  # [rows·cols, 3]


SPEC = FamilySpec(
    name="flux",
    policy="genalign.models.flux.policy:FluxPolicy",
    package="genalign.models.flux",
    pipeline_class="FluxPipeline",
    guidance_embedding=True,
    differentiable_decode=True,
    tiny_builder="genalign.models.flux.tiny:build_tiny_flux_pipeline",
)
"""FLUX.1: 16 pixels per packed token (VAE 8 x 2x2 packing); FLUX.1-dev embeds distilled guidance."""


class FluxPolicy(KLVAEImages, PackedLatents, PipelineLoading):
    """FLUX.1: the MMDiT transformer is the denoiser; CLIP-L (pooled) + T5 encode; the VAE decodes."""

    spec = SPEC
    family = SPEC.name
    display_name = "FLUX"
    diffusers_pipeline = SPEC.pipeline_class
    lora_target_modules = FLUX_LORA_TARGETS
    text_encoder_names = _TEXT_ENCODERS
    tokenizer_names = _TOKENIZERS
    repeated_blocks = FLUX_REPEATED_BLOCKS

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

    def _encode(self, prompts: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
        embeds, pooled, _ = self.pipeline.encode_prompt(
            prompt=list(prompts),
            prompt_2=None,
            device=self.device,
            num_images_per_prompt=1,
            max_sequence_length=self.max_sequence_length,
        )
        return embeds, pooled  # [B, max_sequence_length, D_t5], [B, D_clip]

    @torch.no_grad()
    def encode_prompts(self, prompts: list[str], with_negative: bool) -> Condition:
        """The pipeline's `encode_prompt`: embeds = T5 tokens [B, max_sequence_length, D],
        pooled = CLIP-L's pooled output [B, P]; the negative (true CFG only) is the empty prompt."""
        embeds, pooled = self._encode(prompts)
        if not with_negative:
            return Condition(embeds=embeds, pooled=pooled)
        negative, negative_pooled = self._encode([""] * len(prompts))
        return Condition(embeds=embeds, pooled=pooled, negative_embeds=negative, negative_pooled=negative_pooled)

    def velocity(
        self,
        latents: torch.Tensor,
        sigma: torch.Tensor,
        cond: Condition,
        guidance_scale: float,
        detach_uncond: bool = False,
    ) -> torch.Tensor:
        """v̂ [B, C, h, w] float32 at sigma [B]: packed tokens through the transformer with image
        ids, timestep σ and the embedded guidance; true CFG (v_u + w(v_c − v_u)) when
        guidance_scale > 1."""
        _, _, height, width = latents.shape
        device, dtype, transformer = self.device, self.dtype, self.transformer
        img_ids = latent_image_ids(height // 2, width // 2, device)  # [hw/4, 3]
        txt_ids = torch.zeros(cond.embeds.shape[1], 3, device=device)  # [L, 3]
        context = self.context_tokens(cond)  # None, or (tokens [B, N, 4C], ids [N, 3]) read beside the image
        if context is not None:
            img_ids = torch.cat([img_ids, context[1]])  # [hw/4 + N, 3]

        def forward(hidden_states, timestep, embeds, pooled, guidance=None, context=None) -> torch.Tensor:
            image_tokens = hidden_states.shape[1]
            if context is not None:  # the sequence is [target tokens, context tokens]
                hidden_states = torch.cat([hidden_states, context.to(hidden_states.device, hidden_states.dtype)], dim=1)
            with compute_precision(device, dtype):
                out = transformer(
                    hidden_states=hidden_states.to(device, dtype),
                    timestep=timestep.to(dtype),
                    guidance=guidance,
                    pooled_projections=pooled.to(device, dtype),
                    encoder_hidden_states=embeds.to(device, dtype),
                    txt_ids=txt_ids,
                    img_ids=img_ids,
                    return_dict=False,
                )[0]
            return out[:, :image_tokens].float()  # [B, hw/4, 4C]: the target's tokens only

        conditional = dict(embeds=cond.embeds, pooled=cond.pooled)
        unconditional = dict(embeds=cond.negative_embeds, pooled=cond.negative_pooled)
        if context is not None:  # both CFG branches see the same source (FluxKontextPipeline)
            conditional["context"] = unconditional["context"] = context[0]
        return self.packed_velocity(forward, latents, sigma, conditional, unconditional, guidance_scale, detach_uncond)

    def context_tokens(self, cond: Condition) -> tuple[torch.Tensor, torch.Tensor] | None:
        """Tokens the transformer reads beside the image's and their position ids: none for
        FLUX.1 text-to-image (FLUX.1 Kontext's are its source images, flux_kontext/policy.py)."""
        return None
