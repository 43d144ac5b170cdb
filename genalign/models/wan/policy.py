"""Wan 2.1 text-to-video behind the `FlowPolicy` protocol.

Where it fits: the same loop as SD3 (collector → kernels → replay → rewards), with video
latents. Loading is `WanPipeline.from_pretrained` (hub id or local `save_pretrained`
directory); prompts are encoded by the pipeline's own `encode_prompt` (UMT5, padded with
zeros past each prompt's length, as diffusers does).

Wan specifics, each as `WanPipeline.__call__` runs them:
- latents are `[B, C=16, F_lat, H/8, W/8]` with F_lat = (num_frames − 1) / 4 + 1 (the VAE's
  temporal factor, `vae.config.scale_factor_temporal`), `num_frames = model.num_frames`;
- the transformer's timestep is 1000·σ and it gets only the UMT5 embeddings (no pooled
  vector); CFG is true classifier-free guidance with the negative prompt
  (`model.negative_prompt`, the pipeline's default is the empty prompt);
- the flow shift is the scheduler's: `flow_shift` of the UniPC scheduler Wan ships (3.0 for
  480p) or `shift` of a FlowMatchEulerDiscreteScheduler. We sample with the Euler/SDE
  kernels on `flow_match_sigmas(shift)`, which is what diffusers' Euler scheduler with the
  same shift does, as the Flow-GRPO and DanceGRPO Wan trainers sample;
- decoding un-normalises with the VAE's per-channel `latents_mean` / `latents_std` and
  returns uint8 video `[B, F, 3, H, W]`. The Wan VAE already decodes one latent frame at a
  time with a causal cache; we decode one video at a time, so peak decode memory is one
  video's frames, not the batch's.
"""

from __future__ import annotations

import torch

from genalign.models.base import Condition, compute_precision
from genalign.models.diffusers_common import PipelineLoading, WanVAEVideo, cfg_velocity, encode_prompt_pair
from genalign.models.spec import FamilySpec
from genalign.sampling.schedules import flow_match_sigmas

WAN_REPEATED_BLOCKS = ("WanTransformerBlock",)
WAN_LORA_TARGETS = ["to_q", "to_k", "to_v", "to_out.0"]
"""The attention projections of both self-attention (attn1) and cross-attention (attn2) in
every block: DanceGRPO's Wan LoRA (`target_modules=["to_k", "to_q", "to_v", "to_out.0"]`)
and diffusers' Wan LoRA training; the feed-forward stays frozen."""


def scheduler_shift(scheduler) -> float:
    """The flow shift a Wan scheduler applies: UniPC's `flow_shift` (with use_flow_sigmas,
    as Wan ships it) or FlowMatchEuler's `shift`."""
    config = scheduler.config
    if config.get("use_flow_sigmas", False):
        return float(config.get("flow_shift", 1.0))
    return float(config.get("shift", 1.0))


SPEC = FamilySpec(
    name="wan",
    policy="genalign.models.wan.policy:WanPolicy",
    package="genalign.models.wan",
    pipeline_class="WanPipeline",
    media="video",
    negative_prompt=True,
    tiny_builder="genalign.models.wan.tiny:build_tiny_wan_pipeline",
)
"""Wan 2.1 text-to-video: 16 pixels per latent patch, num_frames = 4k + 1, model.negative_prompt."""


class WanPolicy(WanVAEVideo, PipelineLoading):
    """Wan 2.1 T2V: WanTransformer3DModel denoises; UMT5 encodes; AutoencoderKLWan decodes
    (`WanVAEVideo`: latent shape, decode, encode)."""

    spec = SPEC
    family = SPEC.name
    display_name = "Wan"
    diffusers_pipeline = SPEC.pipeline_class
    config_options = ("num_frames", "negative_prompt")
    lora_target_modules = WAN_LORA_TARGETS
    repeated_blocks = WAN_REPEATED_BLOCKS

    def __init__(
        self,
        pipeline,
        device: torch.device,
        dtype: torch.dtype,
        max_sequence_length: int = 512,
        cfg_batch: str = "joint",
        num_frames: int = 33,
        negative_prompt: str = "",
    ):
        if getattr(pipeline, "transformer_2", None) is not None:
            raise ValueError(
                "model.path holds a two-expert Wan 2.2 pipeline (transformer_2); model.family=wan "
                "trains Wan 2.1's single transformer"
            )
        self._adopt(pipeline, device, dtype, max_sequence_length, cfg_batch, self.display_name)
        self._adopt_video(num_frames)
        self.negative_prompt = negative_prompt
        self.scheduler_shift = scheduler_shift(pipeline.scheduler)

    def encode_prompts(self, prompts: list[str], with_negative: bool) -> Condition:
        """The pipeline's `encode_prompt` (UMT5): embeds [B, max_sequence_length, D], zero past
        each prompt's tokens; the negative is `model.negative_prompt`."""
        return encode_prompt_pair(
            self.pipeline, prompts, self.negative_prompt, with_negative, self.max_sequence_length, self.device
        )

    def velocity(
        self,
        latents: torch.Tensor,
        sigma: torch.Tensor,
        cond: Condition,
        guidance_scale: float,
        detach_uncond: bool = False,
    ) -> torch.Tensor:
        """v̂ [B, C, F_lat, h, w] float32 at sigma [B]: timestep 1000·σ, true CFG with the
        negative prompt by `cfg_velocity`."""
        device, dtype, transformer = self.device, self.dtype, self.transformer

        def forward(hidden_states: torch.Tensor, timestep: torch.Tensor, embeds: torch.Tensor) -> torch.Tensor:
            with compute_precision(device, dtype):
                out = transformer(
                    hidden_states=hidden_states.to(device, dtype),
                    timestep=timestep,
                    encoder_hidden_states=embeds.to(device, dtype),
                    return_dict=False,
                )[0]
            return out.float()  # [B, C, F_lat, h, w]

        timestep = (sigma.to(device, torch.float32) * 1000.0).expand(latents.shape[0])  # [B]
        branch = dict(hidden_states=latents, timestep=timestep)
        return cfg_velocity(
            forward,
            dict(branch, embeds=cond.embeds),
            dict(branch, embeds=cond.negative_embeds),
            guidance_scale,
            detach_uncond,
            self.cfg_batch,
        )

    def sigmas(self, num_steps: int, latent_shape: tuple[int, ...]) -> torch.Tensor:
        """Wan's static flow shift, the same at every resolution and frame count."""
        return flow_match_sigmas(num_steps, shift=self.scheduler_shift)
