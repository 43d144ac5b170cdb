"""NextStep-1 (stepfun-ai) behind the `TokenPolicy` protocol: text-to-image by continuous
image tokens, each drawn by a flow-matching head.

Where it fits: the token collector (`rollout/token_collector.py`) samples with
`sample_tokens` and records `token_log_probs`; AR-GRPO (`algorithms/token_grpo.py`) replays
`token_log_probs` with gradients; rewards see `decode_tokens`'d uint8 images. What a "token"
is here: the flow head's whole walk for one image token, [K + 1, D] (sampling.py), so a
trajectory's tokens are [N, K + 1, D] float32 and its log-prob positions are every stochastic
head step of every token, [N·(K − 1)] — Flow-GRPO's per-step ratio, on each token's head
(docs/algorithms.md §6.3 argues the choice from the paper).

How NextStep-1 generates, kept as the authors' `NextStepPipeline.generate_image`
(stepfun-ai/NextStep-1 6e49bae, `nextstep/models/pipeline_nextstep.py`):
* the caption is tokenized with the checkpoint's tokenizer (left-padded to the batch's longest,
  conditional and unconditional rows together), then every row gets the prefix
  `<|image_area|>{rows}*{cols}` and `<|begin_of_image|>` (rows x cols image tokens);
* CFG runs an unconditional stream whose caption is the negative prompt ("" by default) and
  combines the head's velocities v_u + w (v_c − v_u) at every head step (the decoder runs both
  streams; each sampled token enters both);
* the head samples by the authors' SDE (`rollout.kernel=em_sde` at `rollout.noise_level=1`:
  their sampler, not an approximation of it) over `head_sigmas(K, shift)` with
  K = `rollout.num_steps` (their `num_sampling_steps`, 50 in their example), the last step
  Euler; with `use_norm` (their example's setting) the token is the walk's end layer-normed.
  The three rollout keys reach the head through `configure_rollout`, which `build_policy`
  calls on every copy of the policy (the token path's calls carry guidance and temperature
  only), so rollout, replay and evaluation walk the same σ's with the same kernel;
* tokens unpatchify to the VAE latent, which is un-normalised (/ scaling + shift) and decoded.

Not yet (see docs/models.md): the authors' VAE ships as `checkpoint.pt` (a pickle, which
genalign never loads); `model.path/vae/` must be that VAE in diffusers' AutoencoderKL layout.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from genalign.models.base import (
    ModelConfig,
    SampledTokens,
    TokenCondition,
    compute_precision,
    resolve_device,
    resolve_dtype,
)
from genalign.models.nextstep.checkpoint import load_checkpoint_state, write_checkpoint
from genalign.models.nextstep.head import head_sigmas
from genalign.models.nextstep.modeling import NextStepArchitecture, NextStepModel
from genalign.models.nextstep.sampling import Streams, sample_walks, token_from_walk, walk_log_probs
from genalign.models.spec import FamilySpec

SPEC = FamilySpec(
    name="nextstep",
    policy="genalign.models.nextstep.policy:NextStepPolicy",
    sampler="token",
    size_multiple=16,  # an 8x VAE and 2x2 latent patches: 16 pixels a token side
    text_encoders=False,
    split_cfg=False,
    gradient_checkpointing=False,
    # a trained model (LoRA merged, or full) in the checkpoint's own layout (`export_checkpoint`),
    # which the authors' NextStepPipeline loads (`checkpoint_usage`)
    export="checkpoint",
    hub_weights=False,
    tiny_builder="genalign.models.nextstep.tiny:build_tiny_nextstep",
    # rollout.num_steps / noise_level / kernel are the head's walk (`configure_rollout`)
    rollout_sampler="genalign.models.nextstep.policy:head_rollout_problems",
    package="genalign.models.nextstep",
)

IMAGE_AREA_TOKEN = "<|image_area|>"
BOI_TOKEN = "<|begin_of_image|>"
NEXTSTEP_LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "mlp.0", "mlp.2"]
"""The decoder's attention projections and the flow head's MLPs (its residual blocks' and its
time embedding's): the head is what draws each token."""


@dataclass(frozen=True)
class HeadSampling:
    """The head sampler's settings (the authors' `generate_image` arguments; defaults: their
    text-to-image example, `example.py` at 6e49bae). A run sets num_steps, noise_level and
    kernel through rollout.* (`NextStepPolicy.configure_rollout`; the model preset states these
    defaults: genalign/configs/model/autoregressive/nextstep_1/large.yaml)."""

    num_steps: int = 50
    """K, the head's σ's minus one (`num_sampling_steps`; rollout.num_steps)."""
    shift: float = 1.0
    """`timesteps_shift` (their editing example uses 3.2)."""
    noise_level: float = 1.0
    """a of the kernel (rollout.noise_level): the authors' sampler has no noise parameter, its
    diffusion is sqrt(2σ) (`em_sde` at a = 1); a scales that noise scale, a·sqrt(2σ)."""
    kernel: str = "em_sde"
    """rollout.kernel: any of `genalign.sampling.kernels.KERNELS` (em_sde: the authors')."""
    use_norm: bool = True
    """Layer-norm each sampled token (their example's `use_norm=True`)."""


MIN_HEAD_STEPS = 2
"""The fewest head σ's minus one: one stochastic step (its log-prob is what AR-GRPO trains) and
the authors' last Euler step."""


def head_rollout_problems(rollout) -> list[str]:
    """rollout.num_steps / noise_level values NextStep-1's head cannot train with (the family's
    `rollout_sampler` check; the kernel's name is the config type's)."""
    problems = []
    if rollout.num_steps < MIN_HEAD_STEPS:
        problems.append(
            f"rollout.num_steps={rollout.num_steps}: NextStep-1's flow head walks at least {MIN_HEAD_STEPS} "
            "steps (one stochastic step, then the authors' last Euler step); the authors sample with 50"
        )
    if rollout.noise_level == 0:
        problems.append(
            "rollout.noise_level=0: NextStep-1's flow head then draws no noise and records no log-probs for "
            "AR-GRPO to train; the authors' sampler is noise level 1.0"
        )
    return problems


class NextStepPolicy:
    spec = SPEC
    family = SPEC.name
    lora_target_modules = NEXTSTEP_LORA_TARGETS
    repeated_blocks = ("Qwen2DecoderLayer",)

    def __init__(
        self,
        model: NextStepModel,
        tokenizer,
        vae,
        device: torch.device,
        dtype: torch.dtype,
        sampling: HeadSampling = HeadSampling(),
        negative_prompt: str = "",
        checkpoint_config: dict | None = None,
    ):
        self.transformer = model.to(device).requires_grad_(False)
        self.model = model
        self.tokenizer = tokenizer
        self.vae = vae.to(device, torch.float32).eval().requires_grad_(False)
        self.device, self.dtype = device, dtype
        self.sampling = sampling
        self.negative_prompt = negative_prompt
        self.checkpoint_config = checkpoint_config or model.arch.to_dict()
        """The loaded checkpoint's config.json (every key the authors' `NextStepConfig` reads, the
        ones genalign does not read included): what `export_checkpoint` writes back."""
        self.sigmas = head_sigmas(sampling.num_steps, sampling.shift)  # [K + 1] float32
        vae_factor = 2 ** (len(vae.config.block_out_channels) - 1)
        self.down_factor = vae_factor * model.arch.latent_patch_size
        self.grid = (0, 0)  # (rows, cols) of image tokens, set by check_image_size
        self.num_image_tokens = 0
        if vae.config.latent_channels != model.arch.latent_channels:
            raise ValueError(
                f"vae/config.json latent_channels={vae.config.latent_channels} but config.json "
                f"latent_channels={model.arch.latent_channels}"
            )

    def configure_rollout(self, rollout) -> None:
        """The head's walk from rollout.num_steps / noise_level / kernel (`SPEC.rollout_sampler`:
        `build_policy` calls this on every copy before anything samples or replays)."""
        problems = head_rollout_problems(rollout)
        if problems:
            raise ValueError(problems[0])
        self.sampling = replace(
            self.sampling, num_steps=rollout.num_steps, noise_level=rollout.noise_level, kernel=rollout.kernel
        )
        self.sigmas = head_sigmas(self.sampling.num_steps, self.sampling.shift)  # [K + 1] float32

    # ------------------------------------------------------------------ loading
    @classmethod
    def from_config(cls, cfg: ModelConfig) -> "NextStepPolicy":
        return cls.from_pretrained(cfg.path, cfg.dtype, cfg.device)

    @classmethod
    def from_loaded(cls, bundle, cfg: ModelConfig) -> "NextStepPolicy":
        """The policy over a model, tokenizer and VAE already built (`bundle`: what
        `from_pretrained` loads; the benchmarks' random-weight models), with `cfg`'s device and dtype."""
        return cls(
            bundle.model.eval(), bundle.tokenizer, bundle.vae, resolve_device(cfg.device), resolve_dtype(cfg.dtype)
        )

    @classmethod
    def from_pretrained(cls, path: str, dtype: str = "float32", device: str = "auto") -> "NextStepPolicy":
        """A local directory in the checkpoint's layout: config.json, model.safetensors (or its
        sharded index), the tokenizer files, and vae/ (diffusers AutoencoderKL)."""
        from diffusers import AutoencoderKL
        from transformers import AutoTokenizer

        root = Path(path).expanduser()
        config_file = root / "config.json"
        if not config_file.is_file():
            raise FileNotFoundError(f"model.path={path}: no config.json (a NextStep-1 checkpoint directory)")
        arch = NextStepArchitecture.from_dict(json.loads(config_file.read_text()), str(config_file))
        model = NextStepModel(arch)
        model.load_state_dict(load_checkpoint_state(root), strict=True)
        tokenizer = AutoTokenizer.from_pretrained(root, padding_side="left")
        vae = AutoencoderKL.from_pretrained(root / "vae")
        config = json.loads(config_file.read_text())
        return cls(model.eval(), tokenizer, vae, resolve_device(device), resolve_dtype(dtype), checkpoint_config=config)

    # ------------------------------------------------------------------ export
    def export_checkpoint(self, out_dir: Path, state: dict[str, torch.Tensor]) -> Path:
        """The model's whole `state` (the export's: any LoRA already merged, `merged_state_dict`,
        under the checkpoint's parameter names) in the checkpoint's layout under `out_dir`, the
        loaded config.json, the tokenizer and vae/ beside it: what `from_pretrained` (strict) and
        the authors' `NextStep.from_pretrained` load."""
        return write_checkpoint(out_dir, self.checkpoint_config, state, self.tokenizer, self.vae)

    def checkpoint_usage(self, location: str, cfg) -> list[str]:
        """The model card's snippet for an exported checkpoint at `location`: the authors'
        pipeline sampling the run's size, guidance and head walk, and genalign's loader."""
        rollout = cfg.rollout
        return [
            "import torch",
            "from nextstep.models.pipeline_nextstep import NextStepPipeline  # github.com/stepfun-ai/NextStep-1",
            "",
            f"pipe = NextStepPipeline(model_name_or_path={location!r}, "
            "vae_name_or_path='path/to/NextStep-1-f8ch16-Tokenizer')",
            f"pipe = pipe.to('cuda', torch.{cfg.model.dtype})",
            f"image = pipe.generate_image('a photo', hw=({rollout.height}, {rollout.width}), "
            f"cfg={rollout.guidance_scale}, timesteps_shift={self.sampling.shift}, "
            f"num_sampling_steps={self.sampling.num_steps}, use_norm={self.sampling.use_norm}, seed=0)[0]",
            "",
            "# genalign loads the folder with NextStepPolicy.from_pretrained (vae/: the AutoencoderKL the run used)",
        ]

    # ------------------------------------------------------------------ prompts
    def check_image_size(self, height: int, width: int) -> None:
        """Any multiple of 16 (the VAE's 8 x the 2x2 patches); sets the token grid the next
        prompts, samples and decodes use."""
        if height % self.down_factor or width % self.down_factor:
            raise ValueError(f"rollout.height/width={height}x{width}: NextStep-1 needs multiples of {self.down_factor}")
        self.grid = (height // self.down_factor, width // self.down_factor)
        self.num_image_tokens = self.grid[0] * self.grid[1]

    @torch.no_grad()
    def encode_prompts(self, prompts: list[str], with_negative: bool) -> TokenCondition:
        """Captions (and the negative prompt's rows) left-padded together, then the image prefix."""
        if not self.num_image_tokens:
            raise ValueError("check_image_size(height, width) must run before prompts are encoded")
        texts = list(prompts) + ([self.negative_prompt] * len(prompts) if with_negative else [])
        encoded = self.tokenizer(texts, padding="longest", add_special_tokens=True, return_tensors="pt")
        prefix = self.tokenizer(f"{IMAGE_AREA_TOKEN}{self.grid[0]}*{self.grid[1]}", add_special_tokens=False)[
            "input_ids"
        ]
        prefix = torch.tensor(prefix + [self.tokenizer.convert_tokens_to_ids(BOI_TOKEN)])  # [P]
        ids = torch.cat([encoded["input_ids"], prefix.expand(len(texts), -1)], dim=1)  # [S, L]
        mask = torch.cat([encoded["attention_mask"], torch.ones(len(texts), len(prefix), dtype=torch.long)], dim=1)
        batch = len(prompts)
        if not with_negative:
            return TokenCondition(ids.to(self.device), mask.to(self.device))
        return TokenCondition(*(t.to(self.device) for t in (ids[:batch], mask[:batch], ids[batch:], mask[batch:])))

    def _streams(self, cond: TokenCondition, guidance_scale: float) -> Streams:
        if guidance_scale > 1.0:
            if cond.negative_input_ids is None:
                raise ValueError("guidance_scale > 1 needs the unconditional stream (encode with_negative)")
            return Streams(
                torch.cat([cond.input_ids, cond.negative_input_ids]),
                torch.cat([cond.attention_mask, cond.negative_attention_mask]),
            )
        return Streams(cond.input_ids, cond.attention_mask)

    # ------------------------------------------------------------------ sampling and scoring
    @torch.no_grad()
    def sample_tokens(
        self, cond: TokenCondition, generators: list[torch.Generator], guidance_scale: float, temperature: float
    ) -> SampledTokens:
        """Head walks [B, N, K + 1, D] and their step log-probs as drawn [B, N·(K − 1)]; row b's
        noise from generators[b] (a sample does not depend on its batch neighbours). The
        collector records `token_log_probs`' teacher-forced ones, which replay recomputes."""
        if temperature != 1.0:
            raise ValueError(
                f"rollout.temperature={temperature}: NextStep-1's flow head has no temperature; its noise "
                "is the head sampler's noise level"
            )
        dim = self.model.arch.token_dim

        def draw(k: int) -> torch.Tensor:
            return torch.stack([torch.randn(dim, generator=g, device=self.device) for g in generators])  # [B, D]

        s = self.sampling
        with compute_precision(self.device, self.dtype):
            sampled = sample_walks(
                self.model,
                self._streams(cond.to(self.device), guidance_scale),
                self.num_image_tokens,
                self.sigmas,
                guidance_scale,
                s.kernel,
                s.noise_level,
                draw,
                s.use_norm,
            )
        return SampledTokens(sampled.walks, sampled.log_probs)

    def token_log_probs(
        self,
        cond: TokenCondition,
        tokens: torch.Tensor,
        guidance_scale: float,
        temperature: float,
        detach_uncond: bool = False,
    ) -> torch.Tensor:
        """Per-step log-probs [B, N·(K − 1)] of the stored walks by teacher forcing."""
        s = self.sampling
        if tokens.shape[2] != len(self.sigmas):
            raise ValueError(
                f"stored head walks hold {tokens.shape[2]} states a token, but the policy's head walks "
                f"rollout.num_steps={s.num_steps} ({len(self.sigmas)} states): replay with the rollout's settings"
            )
        with compute_precision(self.device, self.dtype):
            return walk_log_probs(
                self.model,
                self._streams(cond.to(self.device), guidance_scale),
                tokens.to(self.device),
                self.sigmas,
                guidance_scale,
                s.kernel,
                s.noise_level,
                s.use_norm,
                detach_uncond,
            ).float()

    @torch.no_grad()
    def decode_tokens(self, tokens: torch.Tensor) -> torch.Tensor:
        """Walks [B, N, K + 1, D] -> uint8 [B, 3, H, W]: round(clamp(x/2 + 1/2, 0, 1)·255), the
        authors' `to_pil(image, "11")`."""
        latent_tokens = token_from_walk(tokens[:, :, -1].to(self.device).float(), self.sampling.use_norm)
        latents = self.model.unpatchify(latent_tokens, *self.grid)  # [B, C, h, w]
        config = self.vae.config
        latents = latents / config.scaling_factor + (config.shift_factor or 0.0)
        pixels = self.vae.decode(latents).sample.float()  # [B, 3, H, W] in ~[-1, 1]
        return (pixels / 2 + 0.5).clamp(0, 1).mul(255).round().to(torch.uint8).cpu()
