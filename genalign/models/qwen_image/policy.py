"""Qwen-Image behind the `FlowPolicy` protocol.

Where it fits: as `sd3.py` and `flux.py` — `velocity` for rollout and replay, `decode` for
rewards. Loading is `QwenImagePipeline.from_pretrained` (hub id or `save_pretrained`
directory); prompts go through the pipeline's own `encode_prompt` (Qwen2.5-VL's last hidden
state of the chat-templated prompt, the 34-token system turn dropped).

Qwen-Image specifics, each checked against QwenImagePipeline on the tiny model
(tests/integration/test_qwen_image_policy.py):
- Prompt embeddings vary in length; the pipeline pads a batch to its longest with a mask, and
  so do we (`Condition.mask`): the step's prompts are encoded in one call, so a step's
  trajectories share one length and concatenate; the CFG negative is padded to the same
  length so both branches share one shape. Masked tokens take no attention, so the
  prediction is the pipeline's; padding to the step's longest prompt rather than
  `model.max_sequence_length` (the cap) spares the transformer the empty tokens.
- True CFG is the pipeline's `true_cfg_scale` with negative_prompt=" " (Flow-GRPO's and the
  model card's; rollout.guidance_scale; 1 = off), followed by its norm-preserving rescale: the guided
  velocity of each packed token is scaled back to the conditional prediction's norm.
- Latents are stored unpacked [C, h, w] (the VAE's frame axis is added only to decode);
  `velocity` packs them into 2x2-patch tokens; the timestep input is σ.
- The VAE (AutoencoderKLQwenImage) sees `latents · latents_std + latents_mean` per channel.
- The schedule is the pipeline's: dynamic shift μ(image tokens) and shift_terminal.
"""

from __future__ import annotations

import torch

from genalign.models.base import Condition, compute_precision, guided_velocity, rescale_to_norm
from genalign.models.diffusers_common import (
    PackedLatents,
    PipelineLoading,
    masked_pair,
    wan_vae_decode_uint8,
    wan_vae_encode,
)
from genalign.models.spec import FamilySpec

QWEN_IMAGE_REPEATED_BLOCKS = ("QwenImageTransformerBlock",)
QWEN_IMAGE_LORA_TARGETS = [
    "attn.to_q",
    "attn.to_k",
    "attn.to_v",
    "attn.to_out.0",
    "attn.add_q_proj",
    "attn.add_k_proj",
    "attn.add_v_proj",
    "attn.to_add_out",
    "img_mlp.net.0.proj",
    "img_mlp.net.2",
    "txt_mlp.net.0.proj",
    "txt_mlp.net.2",
]
"""Flow-GRPO's Qwen-Image targets (scripts/train_qwenimage.py): every joint-attention projection
and the MLPs of both streams."""
NEGATIVE_PROMPT = " "
"""The CFG negative: a single space, as Flow-GRPO's train_qwenimage.py and Qwen-Image's own
examples pass `negative_prompt=" "` (the empty string templates to a different, shorter prompt)."""


def norm_preserving_cfg(
    uncond: torch.Tensor, cond: torch.Tensor, guidance_scale: float, detach_uncond: bool = False
) -> torch.Tensor:
    """QwenImagePipeline's true CFG on packed tokens [B, N, D]: v_u + w(v_c − v_u), rescaled per
    token to ‖v_c‖ (`rescale_to_norm` over D)."""
    return rescale_to_norm(guided_velocity(uncond, cond, guidance_scale, detach_uncond), cond)  # [B, N, D]


SPEC = FamilySpec(
    name="qwen_image",
    policy="genalign.models.qwen_image.policy:QwenImagePolicy",
    package="genalign.models.qwen_image",
    pipeline_class="QwenImagePipeline",
    guidance_embedding=True,
    tiny_builder="genalign.models.qwen_image.tiny:build_tiny_qwen_image_pipeline",
)
"""Qwen-Image: 16 pixels per packed token; CFG's negative is the pipeline's fixed " "."""


class QwenImagePolicy(PackedLatents, PipelineLoading):
    """Qwen-Image: the MMDiT transformer is the denoiser; Qwen2.5-VL encodes; a 3D-causal VAE decodes."""

    spec = SPEC
    family = SPEC.name
    display_name = "Qwen-Image"
    diffusers_pipeline = SPEC.pipeline_class
    lora_target_modules = QWEN_IMAGE_LORA_TARGETS
    repeated_blocks = QWEN_IMAGE_REPEATED_BLOCKS

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
        self.text_encoder = pipeline.text_encoder
        self._adopt_packed(embedded_guidance, vae_scale_factor=2 ** len(self.vae.temperal_downsample))

    def _encode(self, prompts: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
        """The pipeline's `encode_prompt`: embeds [B, l, D] padded with zeros to the batch's
        longest prompt l (at most max_sequence_length), mask [B, l] int64 (1 = real token)."""
        embeds, mask = self.pipeline.encode_prompt(
            prompt=list(prompts),
            device=self.device,
            num_images_per_prompt=1,
            max_sequence_length=self.max_sequence_length,
        )  # [B, l, D]
        if mask is None:  # the pipeline drops an all-ones mask
            mask = torch.ones(embeds.shape[:2], dtype=torch.long, device=embeds.device)
        return embeds, mask.long()

    @torch.no_grad()
    def encode_prompts(self, prompts: list[str], with_negative: bool) -> Condition:
        """Qwen2.5-VL embeddings [B, L, D] with their mask, L the longest of these prompts (and of
        the CFG negative, `NEGATIVE_PROMPT`, so both branches share one shape). The collector
        encodes a step's prompts in one call, so a step's trajectories share L and concatenate."""
        embeds, mask = self._encode(prompts)
        if not with_negative:
            return Condition(embeds=embeds, mask=mask)
        return masked_pair(embeds, mask, *self._encode([NEGATIVE_PROMPT] * len(prompts)))

    def velocity(
        self,
        latents: torch.Tensor,
        sigma: torch.Tensor,
        cond: Condition,
        guidance_scale: float,
        detach_uncond: bool = False,
    ) -> torch.Tensor:
        """v̂ [B, C, h, w] float32 at sigma [B]: packed tokens through the transformer (timestep
        σ, text mask); norm-preserving true CFG when guidance_scale > 1. An editing family's
        source tokens (`context_tokens`) follow the target's in the image stream, in both CFG
        branches, and the prediction over them is dropped."""
        _, _, height, width = latents.shape
        device, dtype, transformer = self.device, self.dtype, self.transformer
        context = self.context_tokens(cond)  # None, or (tokens [B, N_s, 4C], their (1, h', w') shapes)
        shapes = [(1, height // 2, width // 2), *(context[1] if context is not None else [])]

        def forward(hidden_states, timestep, embeds, mask, guidance=None, sources=None) -> torch.Tensor:
            target = hidden_states.shape[1]
            if sources is not None:
                hidden_states = torch.cat([hidden_states, sources], dim=1)  # [B, N + N_s, 4C]
            with compute_precision(device, dtype):
                out = transformer(
                    hidden_states=hidden_states.to(device, dtype),
                    timestep=timestep,
                    guidance=guidance,
                    encoder_hidden_states=embeds.to(device, dtype),
                    encoder_hidden_states_mask=mask.to(device),
                    img_shapes=[shapes] * hidden_states.shape[0],
                    return_dict=False,
                )[0]
            return out[:, :target].float()  # [B, hw/4, 4C]

        image = {} if context is None else dict(sources=context[0])
        return self.packed_velocity(
            forward,
            latents,
            sigma,
            dict(embeds=cond.embeds, mask=cond.mask, **image),
            dict(embeds=cond.negative_embeds, mask=cond.negative_mask, **image),
            guidance_scale,
            detach_uncond,
            combine=norm_preserving_cfg,
        )

    def context_tokens(self, cond: Condition) -> tuple[torch.Tensor, list[tuple[int, int, int]]] | None:
        """The tokens an editing family appends after the target's (Qwen-Image-Edit's source
        images, `qwen_image_edit/policy.py`) with their (frames, rows, cols) shapes; None for
        Qwen-Image, which reads text alone."""
        return None

    @torch.no_grad()
    def decode(self, latents: torch.Tensor) -> torch.Tensor:
        """latents [B, C, h, w] -> uint8 [B, 3, h·f, w·f] on CPU: per channel
        `latents · std + mean` (as the pipeline writes it), one frame through the VAE."""
        frames = latents.to(self.device, torch.float32)[:, :, None]  # [B, C, 1, h, w]: a one-frame video
        return wan_vae_decode_uint8(self.vae, frames)[:, 0]  # [B, 3, H, W]

    def encode_images(self, images: torch.Tensor) -> torch.Tensor:
        """uint8 [B, 3, H, W] -> latents [B, C, h, w] float32 that `decode` maps back: a one-frame
        video through `wan_vae_encode`."""
        return wan_vae_encode(self.vae, images[:, None])[:, :, 0]  # [B, C, h, w]
