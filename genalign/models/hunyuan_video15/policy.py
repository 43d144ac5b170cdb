"""HunyuanVideo 1.5 text-to-video behind the `FlowPolicy` protocol.

Where it fits: the loop of every family (collector → kernels → replay → rewards) on video
latents, like Wan. Loading is `HunyuanVideo15Pipeline.from_pretrained` (a hub id such as
hunyuanvideo-community/HunyuanVideo-1.5-Diffusers-480p_t2v, or a local `save_pretrained`
directory); prompts are encoded by the pipeline's own `encode_prompt`.

What `HunyuanVideo15Pipeline.__call__` does, and so what this policy does (checked on the tiny
model, tests/integration/test_hunyuan_video15_policy.py):
- Two text streams: Qwen2.5-VL (its third-to-last hidden state of the prompt wrapped in the
  pipeline's system turn and chat template, the first 108 template tokens cropped, padded to
  `tokenizer_max_length` with an attention mask) and a byT5 glyph encoder over the quoted text
  of the prompt (`"..."`), 256 tokens with its own mask, all zero when the prompt quotes
  nothing. Both go to the transformer with their masks. `Condition` carries them as: `embeds`
  the Qwen stream [B, L, 3584], `pooled` the byT5 stream [B, 256, 1472], `mask` both masks
  concatenated [B, L + 256] (split at L = embeds.shape[1]); the negative branch the same.
  `model.max_sequence_length` is the Qwen stream's padded length (the pipeline's 1000 by
  default): the transformer moves every padded token behind the real ones and masks it, so
  the length changes the cost, not the result.
- The transformer reads `[latents, condition latents, condition mask]` on the channel axis
  (2·32 + 1 = 65 channels): for text-to-video both are zero, and its 729 SigLIP image tokens are
  zero too (the transformer then masks them out).
- The timestep is 1000·σ; the schedule is σ = linspace(1, 0, N + 1)[:-1] under the scheduler's
  static shift (5 for 480p), then 0; an Euler step is FlowMatchEulerDiscreteScheduler's.
- CFG is the pipeline's `ClassifierFreeGuidance` guider: v_u + w (v_c − v_u), the negative
  branch `model.negative_prompt` (the pipeline's default: the empty prompt), w the rollout's
  guidance scale (the checkpoint's guider says 6; the distilled checkpoints 1). The pipeline
  reads w from its guider, not from `__call__`; here it is `rollout.guidance_scale`, and
  w ≤ 1 runs the conditional branch alone.
- Latents are `[B, 32, (F − 1)/4 + 1, H/16, W/16]`; the VAE decodes `latents / scaling_factor`
  (no shift) to `[B, 3, F, H, W]` in [-1, 1].
"""

from __future__ import annotations

import torch

from genalign.models.base import Condition, compute_precision
from genalign.models.diffusers_common import PipelineLoading, cfg_velocity, check_image_size, images_to_uint8
from genalign.models.spec import FamilySpec
from genalign.sampling.schedules import linspace_shift_sigmas

HUNYUAN_VIDEO15_LORA_TARGETS = [
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
"""UniRL's HunyuanVideo 1.5 LoRA targets (Tencent-Hunyuan/UniRL 1a7b501,
examples/diffusion/hunyuan_video15_t2v_dancegrpo_trainside.yaml, rank 64, alpha 64): both
streams' attention projections and feed-forward layers of every dual-stream block. peft matches
them as name suffixes, so the token refiner's `attn.to_*` and `ff.net.*` are adapted too, as
there."""
SPEC = FamilySpec(
    name="hunyuan_video15",
    policy="genalign.models.hunyuan_video15.policy:HunyuanVideo15Policy",
    package="genalign.models.hunyuan_video15",
    pipeline_class="HunyuanVideo15Pipeline",
    media="video",
    size_multiple=16,
    negative_prompt=True,
    tiny_builder="genalign.models.hunyuan_video15.tiny:build_tiny_hunyuan_video15_pipeline",
)
"""HunyuanVideo 1.5 text-to-video: video latents of a 16x VAE, model.negative_prompt."""


def split_mask(cond_mask: torch.Tensor, length: int) -> tuple[torch.Tensor, torch.Tensor]:
    """`Condition.mask` [B, L + L2] -> (the Qwen stream's mask [B, L], the byT5 stream's [B, L2])."""
    return cond_mask[:, :length], cond_mask[:, length:]


class HunyuanVideo15Policy(PipelineLoading):
    """HunyuanVideo 1.5 T2V: HunyuanVideo15Transformer3DModel denoises; Qwen2.5-VL and the byT5
    glyph encoder encode; AutoencoderKLHunyuanVideo15 decodes."""

    spec = SPEC
    family = SPEC.name
    display_name = "HunyuanVideo 1.5"
    diffusers_pipeline = SPEC.pipeline_class
    """The pipeline class whose `load_lora_weights` (HunyuanVideo15LoraLoaderMixin) loads our export."""
    config_options = ("num_frames", "negative_prompt")
    text_encoder_names = ("text_encoder", "text_encoder_2")
    tokenizer_names = ("tokenizer", "tokenizer_2")
    lora_target_modules = HUNYUAN_VIDEO15_LORA_TARGETS
    repeated_blocks = ("HunyuanVideo15TransformerBlock",)

    def __init__(
        self,
        pipeline,
        device: torch.device,
        dtype: torch.dtype,
        max_sequence_length: int = 1000,
        cfg_batch: str = "joint",
        num_frames: int = 121,
        negative_prompt: str = "",
    ):
        self._adopt(pipeline, device, dtype, max_sequence_length, cfg_batch, self.display_name)
        pipeline.tokenizer_max_length = max_sequence_length  # the Qwen stream's padded length (docstring)
        self.num_frames = num_frames
        self.negative_prompt = negative_prompt
        self.temporal_factor = int(self.vae.config.temporal_compression_ratio)
        self.spatial_factor = int(self.vae.config.spatial_compression_ratio)
        config = self.transformer.config
        self.patch = (int(config.patch_size_t), int(config.patch_size), int(config.patch_size))
        self.image_tokens = int(pipeline.vision_num_semantic_tokens)  # 729 SigLIP tokens, zero for T2V
        self.image_width = int(config.image_embed_dim)
        scheduler = dict(pipeline.scheduler.config)
        if scheduler.get("use_dynamic_shifting"):
            raise ValueError(
                "the HunyuanVideo 1.5 scheduler has use_dynamic_shifting=True, which HunyuanVideo15Pipeline "
                "cannot run (it passes no mu); the published checkpoints use a static shift"
            )
        self.scheduler_shift = float(scheduler.get("shift", 1.0))

    @torch.no_grad()
    def encode_prompts(self, prompts: list[str], with_negative: bool) -> Condition:
        """The pipeline's `encode_prompt` for `prompts` and, with `with_negative`, for
        `model.negative_prompt` repeated: the two text streams as the module docstring lays out."""

        def encode(texts: list[str]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
            embeds, mask, glyph, glyph_mask = self.pipeline.encode_prompt(
                prompt=texts, device=self.device, dtype=self.dtype, batch_size=len(texts)
            )
            return embeds, glyph, torch.cat([mask, glyph_mask], dim=1)  # [B, L, D], [B, L2, D2], [B, L + L2]

        embeds, glyph, mask = encode(list(prompts))
        if not with_negative:
            return Condition(embeds=embeds, pooled=glyph, mask=mask)
        negative, negative_glyph, negative_mask = encode([self.negative_prompt] * len(prompts))
        return Condition(
            embeds=embeds,
            pooled=glyph,
            mask=mask,
            negative_embeds=negative,
            negative_pooled=negative_glyph,
            negative_mask=negative_mask,
        )

    def _forward(
        self,
        hidden_states: torch.Tensor,
        timestep: torch.Tensor,
        embeds: torch.Tensor,
        glyph: torch.Tensor,
        mask: torch.Tensor,
        condition: torch.Tensor,
        image_embeds: torch.Tensor,
    ) -> torch.Tensor:
        """One transformer call on latents [B, C, F_lat, h, w] and the channel-concatenated
        `condition` [B, C + 1, F_lat, h, w]; float32 out [B, C, F_lat, h, w]."""
        device, dtype = self.device, self.dtype
        text_mask, glyph_mask = split_mask(mask.to(device), embeds.shape[1])
        inputs = torch.cat([hidden_states.to(device, dtype), condition.to(device, dtype)], dim=1)  # [B, 2C + 1, ...]
        with compute_precision(device, dtype):
            out = self.transformer(
                hidden_states=inputs,
                timestep=timestep,
                encoder_hidden_states=embeds.to(device, dtype),
                encoder_attention_mask=text_mask,
                encoder_hidden_states_2=glyph.to(device, dtype),
                encoder_attention_mask_2=glyph_mask,
                image_embeds=image_embeds.to(device, dtype),
                return_dict=False,
            )[0]
        return out.float()

    def condition_inputs(self, latents: torch.Tensor, cond: Condition) -> tuple[torch.Tensor, torch.Tensor]:
        """(condition latents + mask [B, C + 1, F_lat, h, w], image tokens [B, 729, D_img]) of
        text-to-video: all zero, as `HunyuanVideo15Pipeline.prepare_cond_latents_and_mask`."""
        batch, channels, frames, height, width = latents.shape
        condition = torch.zeros(batch, channels + 1, frames, height, width, device=self.device, dtype=self.dtype)
        image_embeds = torch.zeros(batch, self.image_tokens, self.image_width, device=self.device, dtype=self.dtype)
        return condition, image_embeds

    def velocity(
        self,
        latents: torch.Tensor,
        sigma: torch.Tensor,
        cond: Condition,
        guidance_scale: float,
        detach_uncond: bool = False,
    ) -> torch.Tensor:
        """v̂ [B, C, F_lat, h, w] float32 at sigma [B]: timestep 1000·σ, both text streams with
        their masks, the guider's CFG by `cfg_velocity`."""
        batch = latents.shape[0]
        timestep = (sigma.to(self.device, torch.float32) * 1000.0).expand(batch)  # [B]
        condition, image_embeds = self.condition_inputs(latents, cond)
        branch = dict(hidden_states=latents, timestep=timestep, condition=condition, image_embeds=image_embeds)
        return cfg_velocity(
            self._forward,
            dict(branch, embeds=cond.embeds, glyph=cond.pooled, mask=cond.mask),
            dict(branch, embeds=cond.negative_embeds, glyph=cond.negative_pooled, mask=cond.negative_mask),
            guidance_scale,
            detach_uncond,
            self.cfg_batch,
        )

    def latent_shape(self, height: int, width: int) -> tuple[int, int, int, int]:
        """(32, F_lat, H/16, W/16) with F_lat = (num_frames − 1)/4 + 1 for `model.num_frames`."""
        check_image_size(height, width, self.spatial_factor * self.patch[1], self.display_name)
        if (self.num_frames - 1) % self.temporal_factor:
            raise ValueError(
                f"model.num_frames={self.num_frames}: {self.display_name} needs num_frames = "
                f"{self.temporal_factor}k + 1 (its VAE compresses time by {self.temporal_factor}), e.g. 5, 33 or 121"
            )
        latent_frames = (self.num_frames - 1) // self.temporal_factor + 1
        channels = int(self.vae.config.latent_channels)
        return (channels, latent_frames, height // self.spatial_factor, width // self.spatial_factor)

    def sigmas(self, num_steps: int, latent_shape: tuple[int, ...]) -> torch.Tensor:
        """The pipeline's schedule: linspace(1, 0, N + 1)[:-1] under the static shift, then 0."""
        return linspace_shift_sigmas(num_steps, self.scheduler_shift)

    @torch.no_grad()
    def decode(self, latents: torch.Tensor) -> torch.Tensor:
        """latents [B, C, F_lat, h, w] -> uint8 video [B, F, 3, H, W] on the CPU, one video at a
        time, as the pipeline decodes: `vae.decode(latents / scaling_factor)` in float32."""
        scale = float(self.vae.config.scaling_factor)
        videos = []
        for sample in latents.to(self.device, torch.float32).split(1):  # [1, C, F_lat, h, w]
            pixels = self.vae.decode(sample / scale, return_dict=False)[0]  # [1, 3, F, H, W] in [-1, 1]
            videos.append(images_to_uint8(pixels.permute(0, 2, 1, 3, 4)))
        return torch.cat(videos)  # [B, F, 3, H, W]

    @torch.no_grad()
    def encode_images(self, videos: torch.Tensor) -> torch.Tensor:
        """uint8 video [B, F, 3, H, W] -> latents [B, C, F_lat, h, w] float32 that `decode` maps
        back: the posterior mode times `scaling_factor` (the image-to-video pipeline's
        `_get_image_latents`), one video at a time."""
        if videos.dim() != 5:
            raise ValueError(f"{self.display_name} encodes uint8 video [B, F, 3, H, W], got {tuple(videos.shape)}")
        scale = float(self.vae.config.scaling_factor)
        out = []
        for video in videos.split(1):
            pixels = video.to(self.device, torch.float32).permute(0, 2, 1, 3, 4) / 127.5 - 1.0  # [1, 3, F, H, W]
            out.append((self.vae.encode(pixels).latent_dist.mode() * scale).float())
        return torch.cat(out)
