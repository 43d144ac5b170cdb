"""Cosmos-Predict2.5 text-to-world (text-to-video, and text-to-image at one frame) behind the
`FlowPolicy` protocol.

Where it fits: the loop of every family (collector → kernels → replay → rewards) on video
latents, like Wan. Loading is `Cosmos2_5_PredictBasePipeline.from_pretrained` (hub id, e.g.
nvidia/Cosmos-Predict2.5-2B at revision "diffusers/base/post-trained", or a local
`save_pretrained` directory); prompts are encoded by the pipeline's own `encode_prompt`.

Cosmos specifics, each as `Cosmos2_5_PredictBasePipeline.__call__` runs its Text2World mode
(image=None, video=None) and checked against it on the tiny model (tests/integration/test_cosmos_policy.py):
- the prompt, wrapped in the pipeline's system turn and Qwen2.5-VL's chat template and padded
  to `model.max_sequence_length` tokens (no attention mask, in the encoder or in the
  transformer's cross-attention), is encoded by Cosmos-Reason1 (a Qwen2.5-VL): every layer's
  hidden state, each normalised to zero mean and unit std over its channels, concatenated
  (28 x 3584 = 100352 channels for the 2B model: ~100 MB a prompt in bfloat16, held per sample
  for replay); the transformer's `crossattn_proj` maps them to 1024;
- latents are the Wan VAE's `[B, 16, F_lat, H/8, W/8]` (`WanVAEVideo`: F_lat = (num_frames − 1)/4 + 1,
  per-channel latents_mean/std, uint8 video `[B, F, 3, H, W]`; num_frames=1 is one image);
- with no conditioning frames the condition mask is all zero (the transformer reads it as an
  extra input channel), every latent frame's timestep is σ itself (not 1000·σ, given per frame
  as `[B, 1, F_lat, 1, 1]`), and the padding mask is zero; the velocity is the transformer's
  output unchanged (the pipeline's ground-truth velocity on conditioning frames is 0 here);
- CFG is Cosmos' own form v_c + w·(v_c − v_u) with the pipeline's `guidance_scale` w (its
  default 7) and a negative prompt (`model.negative_prompt`; the pipeline's default is its
  long DEFAULT_NEGATIVE_PROMPT, which the cosmos presets set); in the usual v_u + w'(v_c − v_u)
  form that is w' = w + 1. guidance_scale <= 1 is the conditional branch alone, as there;
- the schedule is the Karras (EDM, ρ = 7) one the shipped UniPC scheduler sets from its
  sigma_min/sigma_max (0.01, 200), mapped to flow σ = s/(1+s): it starts at 200/201, not 1.
  We step it with the Euler/SDE kernels, not UniPC's multistep predictor-corrector: a GRPO
  log-prob needs each step to be one Gaussian transition (Flow-GRPO's SDE), which a multistep
  solver is not. An ODE sample therefore equals the pipeline run with a
  FlowMatchEulerDiscreteScheduler on the same σ (the parity test), not with UniPC.

Cosmos' guardrail (`cosmos_guardrail.CosmosSafetyChecker`, which the pipeline builds when none
is given) screens prompts and videos inside `__call__` only. Training and evaluation here never
call `__call__` (they run the transformer and the VAE, like every family), so the pipeline is
loaded with `GuardrailNotLoaded` in its place instead of downloading and holding the guardrail's
models: `policy.pipeline(...)` then refuses to run. Use of the weights remains under the NVIDIA
Open Model License, whose terms on guardrails apply to what a user does with the samples.
"""

from __future__ import annotations

import torch

from genalign.models.base import Condition, compute_precision
from genalign.models.diffusers_common import PipelineLoading, WanVAEVideo, cfg_velocity, encode_prompt_pair
from genalign.models.spec import FamilySpec
from genalign.sampling.schedules import karras_flow_sigmas

COSMOS_REPEATED_BLOCKS = ("CosmosTransformerBlock",)
COSMOS_LORA_TARGETS = ["to_q", "to_k", "to_v", "to_out.0", "ff.net.0.proj", "ff.net.2"]
"""Cosmos-Predict2.5's own LoRA post-training targets (cosmos-predict2.5,
`lora_target_modules="q_proj,k_proj,v_proj,output_proj,mlp.layer1,mlp.layer2"`, rank 32,
alpha 32) under diffusers' names (convert_cosmos_to_diffusers.py: q_proj → to_q, output_proj →
to_out.0, mlp.layer1/2 → ff.net.0.proj / ff.net.2): the q/k/v/out projections of self- (attn1)
and cross-attention (attn2) and both MLP layers of every block. The adaLN modulation, the
embeddings and `crossattn_proj` stay frozen."""
SPEC = FamilySpec(
    name="cosmos",
    policy="genalign.models.cosmos.policy:CosmosPolicy",
    package="genalign.models.cosmos",
    pipeline_class="Cosmos2_5_PredictBasePipeline",
    media="video",
    negative_prompt=True,
    tiny_builder="genalign.models.cosmos.tiny:build_tiny_cosmos_pipeline",
)
"""Cosmos-Predict2.5 text-to-world: video (or an image at num_frames=1), model.negative_prompt."""


def __getattr__(name: str):
    """`COSMOS_NEGATIVE_PROMPT`, the pipeline's default negative prompt, read from diffusers
    only when asked for (importing this module for its `SPEC` must not import diffusers)."""
    if name == "COSMOS_NEGATIVE_PROMPT":
        from diffusers.pipelines.cosmos.pipeline_cosmos2_5_predict import DEFAULT_NEGATIVE_PROMPT

        return DEFAULT_NEGATIVE_PROMPT
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class GuardrailNotLoaded:
    """Stands in for Cosmos' guardrail in a pipeline loaded for training: the pipeline's
    `__call__` (the only place the guardrail runs) raises instead of generating unscreened.
    Not a module, so `save_pretrained` stores no guardrail (as the hub checkpoints store none)."""

    MESSAGE = (
        "genalign loaded this Cosmos2_5_PredictBasePipeline for training without its guardrail "
        "(cosmos_guardrail); to generate with the pipeline, load it with diffusers and the guardrail"
    )

    def to(self, *args, **kwargs) -> "GuardrailNotLoaded":
        return self

    def check_text_safety(self, prompt: str) -> bool:
        raise RuntimeError(self.MESSAGE)

    def check_video_safety(self, frames):
        raise RuntimeError(self.MESSAGE)


def cosmos_guidance(
    uncond: torch.Tensor, cond: torch.Tensor, guidance_scale: float, detach_uncond: bool = False
) -> torch.Tensor:
    """Cosmos' CFG v_c + w (v_c − v_u) [B, ...] (Cosmos2_5_PredictBasePipeline and the
    cosmos-predict2.5 sampler), i.e. the usual form with w + 1; `detach_uncond` stops the
    gradient through v_u without changing the value."""
    if detach_uncond:
        uncond = uncond.detach()
    return cond + guidance_scale * (cond - uncond)


def karras_range(scheduler_config) -> tuple[float, float]:
    """(sigma_min, sigma_max) of the Karras-flow scheduler Cosmos-Predict2.5 ships; any other
    scheduler config is an error (its schedule is not the one the model was released with)."""
    config = dict(scheduler_config)
    if not (config.get("use_karras_sigmas") and config.get("use_flow_sigmas")):
        raise ValueError(
            "the Cosmos pipeline's scheduler is not the Karras flow schedule Cosmos-Predict2.5 ships "
            "(UniPCMultistepScheduler with use_karras_sigmas=True, use_flow_sigmas=True, sigma_min=0.01, "
            f"sigma_max=200); got {config.get('_class_name')} {config}; check model.path"
        )
    if (
        config.get("final_sigmas_type", "zero") != "zero"
        or config.get("sigma_min") is None
        or config.get("sigma_max") is None
    ):
        raise ValueError(
            "the Cosmos scheduler config needs sigma_min, sigma_max and final_sigmas_type='zero' "
            f"(Cosmos-Predict2.5: 0.01, 200, 'zero'); got {config}"
        )
    return float(config["sigma_min"]), float(config["sigma_max"])


class CosmosPolicy(WanVAEVideo, PipelineLoading):
    """Cosmos-Predict2.5 Text2World: CosmosTransformer3DModel denoises; Cosmos-Reason1
    (Qwen2.5-VL) encodes; AutoencoderKLWan decodes (`WanVAEVideo`)."""

    spec = SPEC
    family = SPEC.name
    display_name = "Cosmos"
    diffusers_pipeline = SPEC.pipeline_class
    """Pipeline class whose `load_lora_weights` (CosmosLoraLoaderMixin) loads our exported LoRA."""
    config_options = ("num_frames", "negative_prompt")
    """`model.*` keys the constructor takes (PipelineLoading.from_config)."""
    lora_target_modules = COSMOS_LORA_TARGETS
    repeated_blocks = COSMOS_REPEATED_BLOCKS

    @classmethod
    def pipeline_components(cls) -> dict:
        """The guardrail is not loaded for training (module docstring)."""
        return {"safety_checker": GuardrailNotLoaded()}

    def __init__(
        self,
        pipeline,
        device: torch.device,
        dtype: torch.dtype,
        max_sequence_length: int = 512,
        cfg_batch: str = "joint",
        num_frames: int = 93,
        negative_prompt: str | None = None,
    ):
        config = pipeline.transformer.config
        if config.get("concat_padding_mask", False):
            from diffusers.utils import is_torchvision_available

            if not is_torchvision_available():
                raise ImportError(
                    "this Cosmos transformer concatenates a padding mask, which diffusers resizes with "
                    "torchvision: install torchvision (pip install 'genalign[cosmos]')"
                )
        self._adopt(pipeline, device, dtype, max_sequence_length, cfg_batch, self.display_name)
        self._adopt_video(num_frames)
        self.negative_prompt = __getattr__("COSMOS_NEGATIVE_PROMPT") if negative_prompt is None else negative_prompt
        self.sigma_min, self.sigma_max = karras_range(pipeline.scheduler.config)

    def encode_prompts(self, prompts: list[str], with_negative: bool) -> Condition:
        """The pipeline's `encode_prompt`: embeds [B, max_sequence_length, layers · hidden], the
        normalised Qwen2.5-VL hidden states of every layer; the negative is `model.negative_prompt`."""
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
        """v̂ [B, C, F_lat, h, w] float32 at sigma [B]: Text2World inputs (zero condition and
        padding masks, timestep σ per latent frame), Cosmos' CFG by `cfg_velocity`."""
        device, dtype, transformer = self.device, self.dtype, self.transformer
        batch, _, frames, height, width = latents.shape
        # one padding mask at pixel size for the whole batch, all zero (no padded pixels), as the pipeline passes it
        padding_mask = torch.zeros(
            1, 1, height * self.spatial_factor, width * self.spatial_factor, device=device, dtype=dtype
        )

        def forward(hidden_states: torch.Tensor, timestep: torch.Tensor, embeds: torch.Tensor) -> torch.Tensor:
            # no conditioning frames: the condition-mask channel is zero everywhere
            condition_mask = torch.zeros(
                hidden_states.shape[0], 1, *hidden_states.shape[2:], device=device, dtype=dtype
            )  # [B, 1, F_lat, h, w]
            with compute_precision(device, dtype):
                out = transformer(
                    hidden_states=hidden_states.to(device, dtype),
                    condition_mask=condition_mask,
                    timestep=timestep,
                    encoder_hidden_states=embeds.to(device, dtype),
                    padding_mask=padding_mask,
                    return_dict=False,
                )[0]
            return out.float()  # [B, C, F_lat, h, w]

        timestep = sigma.to(device, torch.float32).expand(batch).reshape(batch, 1, 1, 1, 1)
        timestep = timestep.expand(batch, 1, frames, 1, 1)  # [B, 1, F_lat, 1, 1]: σ for every latent frame
        branch = dict(hidden_states=latents, timestep=timestep)
        return cfg_velocity(
            forward,
            dict(branch, embeds=cond.embeds),
            dict(branch, embeds=cond.negative_embeds),
            guidance_scale,
            detach_uncond,
            self.cfg_batch,
            combine=cosmos_guidance,
        )

    def sigmas(self, num_steps: int, latent_shape: tuple[int, ...]) -> torch.Tensor:
        """The shipped scheduler's Karras flow schedule, the same at every resolution and length."""
        return karras_flow_sigmas(num_steps, self.sigma_min, self.sigma_max)
