"""`ModelConfig`: which model to load and what to train in it (the `model.*` keys).

Where it fits: config/schema.py composes it into `ExperimentConfig`; the family registry
(`registry.py`) builds the family it names. Plain dataclasses, importing nothing above
config/, so composing a config never imports a model library.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal

from genalign.config.checks import empty_path_problems, positive_problems
from genalign.hub import HUB_ID

LoraInit = Literal["gaussian", "default"]
"""`model.lora.init`'s choices (what each passes to peft: weights/lora.py:LORA_INITS)."""
ComputeDtype = Literal["float32", "float16", "bfloat16"]
TrainMode = Literal["lora", "full"]
CfgBatch = Literal["joint", "split"]
CompileMode = Literal["regional", "full"]
Float8Recipe = Literal["none", "tensorwise", "rowwise"]
"""`model.float8`'s choices: torchao's float8 training recipe names (`Float8LinearRecipeName`)."""
Experts = Literal["both", "high_noise", "low_noise"]
"""`model.experts`' choices: which experts of a two-expert checkpoint train (models/experts.py)."""
SourceResolution = Literal["run", "pipeline"]
"""`model.source_resolution`'s choices: the size an editing family's VAE sees each source at."""
GivenFrames = Literal["stepped", "excluded"]
"""`model.given_frames`' choices: whether latent frames the condition gives are sampled too."""

DEVICE = re.compile(r"^(auto|cpu|mps|cuda(:\d+)?)$")
"""`model.device` values `resolve_device` accepts (whether that device exists is a machine check)."""


@dataclass
class LoraConfig:
    """LoRA adapter on the denoiser (peft). Presets live in `configs/model/...`."""

    rank: int = 32
    """LoRA rank r."""
    alpha: float = 64.0
    """LoRA alpha; the effective scale is alpha / rank (Flow-GRPO SD3.5: r=32, alpha=64)."""
    init: LoraInit = "gaussian"
    """peft `init_lora_weights`: "gaussian" (Flow-GRPO), "default" (Kaiming A, zero B)."""
    dropout: float = 0.0
    """LoRA dropout on the adapter input (peft `lora_dropout`; Flow-GRPO: 0)."""
    target_modules: list[str] = field(default_factory=list)
    """Module-name suffixes the adapter attaches to; empty = the family's default targets."""

    def problems(self) -> list[str]:
        problems = positive_problems({"model.lora.rank": self.rank})
        if not 0 <= self.dropout < 1:
            problems.append(f"model.lora.dropout must be in [0, 1), got {self.dropout}")
        return problems


@dataclass
class ModelCardConfig:
    """What an exported model card says about the base model (Hugging Face's model-card
    metadata). Never guessed: the card names a base model only when model.path is a Hub id or
    `base_model` names one, and the licence keys only for the model they describe."""

    base_model: str | None = None
    """Hub id of the base model when model.path is a local copy of it (e.g.
    stabilityai/stable-diffusion-3.5-medium); ignored when model.path is itself a Hub id (the
    card names that). null with a local model.path: the card names no base model."""
    describes: str | None = None
    """The Hub id the licence keys below are about (the presets set their model's id): they
    are used only when the run trains from that model (model.path, or base_model above), so a
    run that loads another model is never carded with this one's licence. null: the licence
    keys describe whatever model this run trains."""
    license: str | None = None
    """The base model's licence as the Hub names it (apache-2.0, mit, other, ...): weights
    trained from it come under its terms. null: the card states no licence."""
    license_name: str | None = None
    """Short name of a licence the Hub does not list (with license: other), e.g. flux-1-dev-non-commercial-license."""
    license_link: str | None = None
    """Where that licence's text is (with license: other)."""

    def problems(self) -> list[str]:
        problems = []
        if self.license == "other" and not self.license_name:
            problems.append(
                "model.card.license=other needs model.card.license_name (and license_link): the Hub "
                "shows that name for a licence it does not list"
            )
        for key in ("base_model", "describes"):
            value = getattr(self, key)
            if value is not None and not HUB_ID.match(value):
                problems.append(
                    f"model.card.{key}={value!r} is not a Hub id (org/name); set the id the base model "
                    "has on the Hub, or null"
                )
        return problems


@dataclass
class ModelConfig:
    """Which model to load and what to train in it."""

    family: str = "sd3"
    """Model family: "sd3" (Stable Diffusion 3 / 3.5), "flux" (FLUX.1), "flux_kontext" (FLUX.1
    Kontext editing), "flux2" (FLUX.2 [dev]), "flux2_klein" (FLUX.2 [klein] 4B / 9B and their
    -base checkpoints), "qwen_image" (Qwen-Image), "qwen_image_edit" (Qwen-Image-Edit editing),
    "qwen_image_edit_plus" (Qwen-Image-Edit-2509 / -2511, up to three source images), "wan"
    (Wan 2.1 and Wan 2.2 text-to-video: T2V-A14B's two experts, TI2V-5B), "wan_i2v" (Wan 2.1 I2V
    and Wan 2.2 I2V-A14B image-to-video), "cosmos" (Cosmos-Predict2.5 text-to-world: video, or
    an image at num_frames=1), "hunyuan_video15" (HunyuanVideo 1.5 text-to-video), "z_image"
    (Z-Image-Turbo and the base Z-Image), "janus" (Janus-Pro, token-autoregressive:
    `TokenPolicy`, trained by ar_grpo) or "toy" (the shipped CPU demo); or a user's family, the
    dotted path "package.module:SPEC" of its `FamilySpec`, listed in model.allow_import."""
    allow_import: list[str] = field(default_factory=list)
    """Dotted model.family paths ("package.module:SPEC") allowed to be imported: importing a
    module runs its code, so only a list on your own command line or recipe counts (a
    checkpoint's stored list is ignored), as with reward.allow_import."""
    path: str = "stabilityai/stable-diffusion-3.5-medium"
    """Hugging Face hub id or a local directory written by `save_pretrained`."""
    revision: str | None = None
    """Hub revision (branch, tag or commit) of model.path; null: the default branch."""
    dtype: ComputeDtype = "float32"
    """Compute dtype of the denoiser and the frozen weights of the text encoders and base
    model: float32 | float16 | bfloat16. Trained weights (LoRA or full) and optimizer state
    stay float32 masters whatever this says; the denoiser runs under autocast to this dtype
    (float16 adds loss scaling). The SDE math and the VAE always run in float32."""
    device: str = "auto"
    """"auto" (cuda if available, else cpu), "cpu", "cuda", "cuda:1", ..."""
    train_mode: TrainMode = "lora"
    """"lora" (adapter only; the reference is the adapter-disabled model) or "full"."""
    lora: LoraConfig = field(default_factory=LoraConfig)
    max_sequence_length: int = 128
    """Text-token budget of a prompt: T5 tokens for SD3 and FLUX (Flow-GRPO's train_sd3.py
    encodes with 128; StableDiffusion3Pipeline's default is 256, FluxPipeline's 512), Qwen2.5-VL
    tokens after the chat template for Qwen-Image (QwenImagePipeline: 512), UMT5 tokens for Wan
    (WanPipeline and the wan_2_1 presets: 512), Qwen2.5-VL tokens of the chat-templated prompt
    with its system turn for Cosmos (Cosmos2_5_PredictBasePipeline and the cosmos preset: 512,
    always padded to this length). For Qwen-Image it is a cap: a step's prompts are padded
    with a mask to the step's longest (and the CFG negative to the same length), as
    QwenImagePipeline pads a batch."""
    embedded_guidance: float | None = None
    """Distilled-guidance strength fed to a guidance-embedded transformer (FLUX.1-dev: 3.5, the
    `guidance_scale` of FluxPipeline); null for models without that embedding (FLUX.1-schnell,
    Qwen-Image, SD3, Wan). It is not CFG: rollout.guidance_scale stays the true-CFG scale
    (FluxPipeline's `true_cfg_scale`, QwenImagePipeline's `true_cfg_scale`; 1 = off)."""
    num_frames: int = 1
    """Frames per generated sample: 1 for image families (and janus); video families (wan, cosmos) need their
    VAE's 4k + 1 (the wan_2_1 and cosmos presets: 33; Cosmos2_5_PredictBasePipeline's default 93;
    cosmos at 1 is its text-to-image mode). Rewards then see uint8 video [B, F, 3, H, W]."""
    negative_prompt: str = ""
    """CFG's negative prompt for families whose pipeline takes one as an option (wan: the
    pipeline's default is the empty prompt, as here; cosmos: the cosmos presets set the
    pipeline's default, its DEFAULT_NEGATIVE_PROMPT; z_image: the empty prompt, as ZImagePipeline's
    default). SD3 and FLUX use the empty prompt and
    Qwen-Image its pipeline's " " (see qwen_image.py); for them this must stay empty."""
    experts: Experts = "both"
    """Which experts of a two-expert checkpoint (Wan 2.2 T2V-A14B: `transformer`, the high-noise
    expert, and `transformer_2`, the low-noise one) train, by LoRA or in full: "both",
    "high_noise" or "low_noise"; the other stays frozen and unadapted. Every step still runs
    the expert the pipeline's boundary picks. Families without experts must keep "both"."""
    low_noise_guidance_scale: float | None = None
    """CFG scale of the low-noise expert's steps (WanPipeline's `guidance_scale_2`; Wan 2.2
    T2V-A14B's published setting is 3.0 beside 4.0 for the high-noise steps); null: the same
    as rollout.guidance_scale, as the pipeline defaults. As in the pipeline, CFG runs at all
    only when rollout.guidance_scale > 1. Families without experts must keep it null."""
    source_resolution: SourceResolution = "run"
    """The size an editing family encodes each source image at (the manifest check holds the
    sources to the run's size): "run" = that size as it is (Flow-GRPO's
    train_qwenimage_edit_plus.py and train_flux_kontext.py, which resize every source to the
    run's resolution), or "pipeline" = resized as the family's diffusers pipeline resizes it
    before its VAE (QwenImageEditPipeline / QwenImageEditPlusPipeline: about 1024² pixels at the
    source's aspect ratio, sides multiples of 32, by the pipeline's own `calculate_dimensions`;
    for Qwen-Image-Edit Qwen2.5-VL then sees that picture too. FluxKontextPipeline: the preferred
    Kontext resolution nearest the source's aspect ratio, about 1 MP, sides multiples of 16, its
    `_auto_resize`). Either way the result stays rollout.height x rollout.width. "pipeline" puts
    about (1024/16)² = 4096 source tokens a picture beside the target's, which the memory plan
    counts, and for Qwen-Image-Edit about 1.4k more Qwen2.5-VL tokens (raise
    model.max_sequence_length).
    Families without that resize (`FamilySpec.pipeline_source_size`) must keep "run"."""
    given_frames: GivenFrames = "stepped"
    """Latent frames the condition gives (Wan 2.2 TI2V-5B's image-to-video: latent frame 0 is the
    encoded first frame, its tokens at timestep 0): "stepped" = drawn as noise and stepped by the
    SDE with the others, from the velocity the transformer predicts there, and counted in every
    per-sample mean (log-prob, KL) — what WanImageToVideoPipeline and Flow-Factory's Wan I2V
    adapter do (X-GenGroup/Flow-Factory a0b2bc5): the transformer never reads those latents (it
    reads the image there) and decoding puts the image back over them, so no pixel differs;
    "excluded" = the policy samples only the generated frames, so log-probs, losses and offline
    latents are theirs alone. Families whose condition gives no latent frames must keep "stepped"
    (`FamilySpec.decode_reads_condition`); a checkpoint without them refuses "excluded" when it loads."""
    offload_text_encoders: bool = False
    """Keep the text encoders on the CPU except while a step's prompts are encoded (once per
    step, the step's distinct prompts): their weights leave the device for sampling, replay and
    backward. The memory lever for the largest encoders (Qwen2.5-VL-7B 15.5 GiB, T5-XXL 8.9 GiB
    in bfloat16), at the cost of copying them to the device and back once per step."""
    gradient_checkpointing: bool = False
    """Recompute the denoiser's activations in backward: the memory lever for larger replay
    micro-batches (about a third more train time)."""
    cfg_batch: CfgBatch = "joint"
    """How CFG's two branches run: "joint" = one forward over [uncond, cond] (Flow-GRPO);
    "split" = two forwards of half the batch, so that with algorithm.detach_uncond the
    unconditional one runs without autograd in replay and backward covers only the
    conditional half (about a quarter less train time, less activation memory). Rollout and
    replay always use the same form, so the parity preflight stays exact either way."""
    compile: bool = False
    """torch.compile the denoiser (`compile_mode`); the first steps pay the compilation."""
    compile_mode: CompileMode = "regional"
    """"regional": compile each repeated transformer block once (diffusers' regional
    compilation; minutes less to compile, the same speed); "full": the whole denoiser."""
    float8: Float8Recipe = "none"
    """Float8 matmuls in the denoiser's linear layers through torchao's float8 training
    (`convert_to_float8_training`, recipe by name): "tensorwise" (one dynamic scale per tensor,
    the fastest), "rowwise" (a scale per row, power-of-two scales: closer to bf16), or "none".
    Every nn.Linear of the denoiser whose two dims are multiples of 16 is converted — LoRA's
    frozen base layers included, its small A/B matrices not; the weights themselves stay as
    they are (float32 masters for what trains), only the matmul's inputs are cast to float8.
    Rollout and replay run the same converted layers. Needs model.dtype=bfloat16, a GPU with
    float8 matmuls (compute capability 8.9+: Ada, Hopper, Blackwell) and `genalign[float8]`;
    torchao recommends model.compile=true with it (the casts fuse into the graph)."""
    float8_emulate: bool = False
    """Run model.float8's casts but the matmuls in float32 on the dequantised values (torchao's
    `emulate`): the same rounding without float8 hardware, for tests on a CPU; no speedup."""
    allow_tf32: bool = True
    """TF32 for float32 matmuls on CUDA (VAE decode, fp32 runs), as Flow-GRPO sets it."""
    card: ModelCardConfig = field(default_factory=ModelCardConfig)
    """Base-model metadata for exported model cards (the Hub id of a local copy, the licence);
    the presets set their model's licence."""

    def problems(self) -> list[str]:
        """The model.* values no family could run. What the family declares (sizes, frames, a
        guidance embedding, a negative prompt) is checked in `family_checks.py`, from its spec."""
        problems = empty_path_problems({"model.path": self.path})
        if not DEVICE.match(self.device):
            problems.append(f"model.device={self.device!r} is not a device; use auto, cpu, cuda or cuda:<index>")
        if self.embedded_guidance is not None and self.embedded_guidance <= 0:
            problems.append(
                f"model.embedded_guidance must be > 0 (FLUX.1-dev: 3.5) or null, got {self.embedded_guidance}"
            )
        if self.low_noise_guidance_scale is not None and self.low_noise_guidance_scale < 1:
            problems.append(
                f"model.low_noise_guidance_scale must be >= 1 (1 = the conditional prediction alone) or null, "
                f"got {self.low_noise_guidance_scale}"
            )
        if self.num_frames < 1:
            problems.append(f"model.num_frames must be >= 1, got {self.num_frames}")
        return problems + self.float8_problems() + self.lora.problems() + self.card.problems()

    def float8_problems(self) -> list[str]:
        """model.float8 against the other precision keys (what this machine offers is checked
        in preflight/float8_checks.py)."""
        if self.float8 == "none":
            return (
                ["model.float8_emulate=true has nothing to emulate with model.float8=none; remove it"]
                if self.float8_emulate
                else []
            )
        if self.dtype != "bfloat16":
            return [
                f"model.float8={self.float8} needs model.dtype=bfloat16 (got {self.dtype}): torchao's float8 "
                "training computes around its float8 matmuls in bfloat16; set model.dtype=bfloat16 or "
                "model.float8=none"
            ]
        return []
