"""Wan 2.1 and Wan 2.2 text-to-video behind the `FlowPolicy` protocol.

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

Wan 2.2, from what the checkpoint's `model_index.json` says (WanPipeline's config):
- T2V-A14B holds two experts, `transformer` (high noise) and `transformer_2` (low noise), and
  `boundary_ratio` (0.875): a step whose timestep t = 1000·σ is >= boundary_ratio ·
  num_train_timesteps runs `transformer` with `guidance_scale`, a later one `transformer_2`
  with `guidance_scale_2` (`model.low_noise_guidance_scale`; null = the same), exactly the
  comparison `WanPipeline.__call__` makes. Both sit in one trained module
  (`models/experts.py:DenoiserExperts`); `model.experts` picks which of them train. A batch
  whose samples sit at different steps (replay) runs each expert on its own rows.
- TI2V-5B is one dense transformer with `expand_timesteps`: the timestep is given per latent
  token ([B, F_lat·h/2·w/2], all equal to t for text-to-video; 0 on the image's frame for its
  image-to-video, `token_timesteps`), and its VAE (z_dim 48, a 2x2 pixel patch: 16 pixels per
  latent) sets the latent shape through `WanVAEVideo`.
"""

from __future__ import annotations

import torch

from genalign.models.base import Condition, compute_precision
from genalign.models.diffusers_common import PipelineLoading, WanVAEVideo, cfg_velocity, encode_prompt_pair, place
from genalign.models.experts import DenoiserExperts, shard_local, trained_components
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
    experts=True,
    tiny_builder="genalign.models.wan.tiny:build_tiny_wan_pipeline",
    tiny_variants=(
        ("Wan-AI/Wan2.2-T2V-A14B-Diffusers", "genalign.models.wan.tiny:build_tiny_wan22_a14b_pipeline"),
        ("Wan-AI/Wan2.2-TI2V-5B-Diffusers", "genalign.models.wan.tiny:build_tiny_wan22_ti2v_pipeline"),
    ),
)
"""Wan 2.1 / 2.2 text-to-video: 16 pixels per latent patch (32 for TI2V-5B's VAE, checked at
load), num_frames = 4k + 1, model.negative_prompt, two experts (model.experts)."""


class WanPolicy(WanVAEVideo, PipelineLoading):
    """Wan 2.1 / 2.2 T2V: WanTransformer3DModel denoises (one, or Wan 2.2 A14B's two experts as
    one `DenoiserExperts`); UMT5 encodes; AutoencoderKLWan decodes (`WanVAEVideo`: latent
    shape, decode, encode)."""

    spec = SPEC
    family = SPEC.name
    display_name = "Wan"
    diffusers_pipeline = SPEC.pipeline_class
    config_options = ("num_frames", "negative_prompt", "experts", "low_noise_guidance_scale")
    lora_target_modules = WAN_LORA_TARGETS
    repeated_blocks = WAN_REPEATED_BLOCKS
    given_latent_frames = 0
    """Leading latent frames the condition gives and the transformer reads at timestep 0: none for
    text-to-video; Wan 2.2 TI2V-5B's image-to-video gives its first frame (models/wan_i2v)."""
    stepped_given_frames = 0
    """How many of the `given_latent_frames` the policy samples too (model.given_frames: "stepped",
    all of them, as the pipeline steps them; "excluded", none): its samples hold them first, its
    velocity is the transformer's prediction there, and they count in every per-sample mean."""

    def __init__(
        self,
        pipeline,
        device: torch.device,
        dtype: torch.dtype,
        max_sequence_length: int = 512,
        cfg_batch: str = "joint",
        num_frames: int = 33,
        negative_prompt: str = "",
        experts: str = "both",
        low_noise_guidance_scale: float | None = None,
    ):
        self._adopt(pipeline, device, dtype, max_sequence_length, cfg_batch, self.display_name)
        self._adopt_video(num_frames)
        self.negative_prompt = negative_prompt
        self.scheduler_shift = scheduler_shift(pipeline.scheduler)
        self.expand_timesteps = bool(pipeline.config.get("expand_timesteps", False))
        self.low_noise_guidance_scale = low_noise_guidance_scale
        self.boundary_timestep = self._adopt_experts(pipeline, experts, low_noise_guidance_scale)

    def _adopt_experts(self, pipeline, experts: str, low_noise_guidance_scale: float | None) -> float | None:
        """Wrap a two-expert pipeline's transformers as one trained module; returns the boundary
        timestep (boundary_ratio · num_train_timesteps, as WanPipeline computes it), None for
        a single transformer."""
        second = getattr(pipeline, "transformer_2", None)
        ratio = pipeline.config.get("boundary_ratio")
        if second is None:
            if experts != "both" or low_noise_guidance_scale is not None:
                raise ValueError(
                    f"model.experts={experts} / model.low_noise_guidance_scale={low_noise_guidance_scale}: "
                    "model.path holds one transformer (no transformer_2), so there are no experts to choose"
                )
            return None
        if ratio is None:
            raise ValueError(
                "model.path holds a transformer_2 but no boundary_ratio in model_index.json: WanPipeline "
                "would never run it; set boundary_ratio (Wan 2.2 T2V-A14B: 0.875)"
            )
        components = {"transformer": self.transformer, "transformer_2": place(second, self.device, self.dtype)}
        second.requires_grad_(False)
        self.transformer = DenoiserExperts(components, trained_components(experts, tuple(components)))
        return float(ratio) * pipeline.scheduler.config.num_train_timesteps

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
        """v̂ [B, C, F_lat, h, w] float32 at sigma [B]: timestep 1000·σ (per latent token with
        `expand_timesteps`), true CFG with the negative prompt by `cfg_velocity`; with two
        experts each row runs the expert (and CFG scale) its timestep picks; sharded experts run
        in lockstep over the ranks (`DenoiserExperts.experts_to_run`: a rank without rows for an
        expert another rank runs runs it on a filler row that contributes nothing)."""
        batch = latents.shape[0]
        timestep = (sigma.to(self.device, torch.float32) * 1000.0).expand(batch)  # [B]
        if self.boundary_timestep is None:
            return self._guided(self.transformer, latents, timestep, cond, guidance_scale, detach_uncond)
        high = timestep >= self.boundary_timestep  # [B] WanPipeline: `t >= boundary_timestep` -> transformer
        # WanPipeline runs CFG only when guidance_scale > 1, then the low-noise steps use guidance_scale_2
        low_scale = guidance_scale
        if guidance_scale > 1.0 and self.low_noise_guidance_scale is not None:
            low_scale = self.low_noise_guidance_scale
        routes = (("transformer", high, guidance_scale), ("transformer_2", ~high, low_scale))
        run = self.transformer.experts_to_run({name: bool(rows.any()) for name, rows, _ in routes})
        if sum(run.values()) == 1:  # one expert for the whole batch (every rollout step), on every rank
            name, _, scale = next(route for route in routes if run[route[0]])
            out = self._guided(getattr(self.transformer, name), latents, timestep, cond, scale, detach_uncond)
            return self._tie_idle_experts(out, {name})
        out, fillers = None, []
        for name, rows, scale in routes:  # replay of samples at different steps: each expert on its rows
            index = rows.nonzero().squeeze(1)  # [b]
            filler = run[name] and len(index) == 0
            if filler:  # sharded experts in lockstep: another rank has rows for this expert, this one none
                index = index.new_zeros(1)  # row 0 runs it, contributing nothing (`fillers`)
            elif not run[name]:
                continue
            part = self._guided(
                getattr(self.transformer, name),
                latents[index.to(latents.device)],
                timestep[index],
                cond.index(index.to(cond.embeds.device)),
                scale,
                detach_uncond,
            )  # [b, C, F_lat, h, w]
            if filler:  # an empty sum: exactly 0, yet its backward reaches the expert (its reduce-scatter runs)
                fillers.append(part[:0].sum())
            else:
                out = part.new_zeros((batch, *part.shape[1:])) if out is None else out
                out = out.index_copy(0, index.to(out.device), part)
        return out + sum(fillers) if fillers else out

    def _tie_idle_experts(self, out: torch.Tensor, ran: set[str]) -> torch.Tensor:
        """`out` plus 0 x the trained weights of the trained experts this call did not run, when
        autograd records: every backward then reaches every trained weight (a zero gradient for
        the idle expert), so a step on a frozen expert still backpropagates and every rank's
        backward reduces the same gradients whichever expert its samples used."""
        if not torch.is_grad_enabled():
            return out
        idle = [
            param
            for name in self.transformer.trained
            if name not in ran
            for param in getattr(self.transformer, name).parameters()
            if param.requires_grad
        ]
        if not idle:
            return out
        # an idle FSDP2 expert's weights are this rank's shards: its local part, no collective
        return out + 0.0 * torch.stack([shard_local(param).sum() for param in idle]).sum().to(out.device, out.dtype)

    def _guided(
        self,
        transformer: torch.nn.Module,
        latents: torch.Tensor,
        timestep: torch.Tensor,
        cond: Condition,
        guidance_scale: float,
        detach_uncond: bool,
    ) -> torch.Tensor:
        """`cfg_velocity` around one transformer at timesteps [B]."""
        device, dtype = self.device, self.dtype

        def forward(
            hidden_states: torch.Tensor, timestep: torch.Tensor, embeds: torch.Tensor, **extra: torch.Tensor
        ) -> torch.Tensor:
            with compute_precision(device, dtype):
                out = transformer(
                    hidden_states=hidden_states.to(device, dtype),
                    timestep=timestep,
                    encoder_hidden_states=embeds.to(device, dtype),
                    **{name: value.to(device, dtype) for name, value in extra.items()},
                    return_dict=False,
                )[0]
            return out.float()  # [B, C, F_lat, h, w]

        inputs = self.transformer_inputs(latents, cond)
        if self.expand_timesteps:  # TI2V-5B: one timestep per latent token, as the pipelines' expand_timesteps
            timestep = self.token_timesteps(timestep, tuple(inputs["hidden_states"].shape[2:]))  # [B, N]
        branch = dict(timestep=timestep, **inputs)
        out = cfg_velocity(
            forward,
            dict(branch, embeds=cond.embeds),
            dict(branch, embeds=cond.negative_embeds),
            guidance_scale,
            detach_uncond,
            self.cfg_batch,
        )  # [B, C, given + F_lat, h, w]
        return out[:, :, self.unsampled_latent_frames :]  # the sampled frames' velocity

    @property
    def unsampled_latent_frames(self) -> int:
        """Leading latent frames the transformer reads but the policy does not sample."""
        return self.given_latent_frames - self.stepped_given_frames

    def token_timesteps(self, timestep: torch.Tensor, frames_height_width: tuple[int, ...]) -> torch.Tensor:
        """Timesteps [B] -> one per transformer token [B, N] over latent frames x height x width: the
        pipelines' `mask[:, ::p, ::p] * t` with the mask 0 on the `given_latent_frames` (whose
        tokens read t = 0) and 1 elsewhere (a product, as they write it: 1 · t is t exactly)."""
        frames, height, width = frames_height_width
        mask = torch.ones(frames // self.patch_size[0], height // self.patch_size[1], width // self.patch_size[2])
        mask[: self.given_latent_frames] = 0.0
        return mask.flatten().to(timestep)[None] * timestep[:, None]  # [B, N]

    def transformer_inputs(self, latents: torch.Tensor, cond: Condition) -> dict[str, torch.Tensor]:
        """What the transformer reads beside the timestep and the prompt, the same in both CFG
        branches: `hidden_states`, the latents [B, C, F_lat, h, w] for text-to-video (an
        image-to-video policy adds its image condition, models/wan_i2v: on the channels, or as the
        `given_latent_frames` before the latents)."""
        return {"hidden_states": latents}

    def sigmas(self, num_steps: int, latent_shape: tuple[int, ...]) -> torch.Tensor:
        """Wan's static flow shift, the same at every resolution and frame count."""
        return flow_match_sigmas(num_steps, shift=self.scheduler_shift)
