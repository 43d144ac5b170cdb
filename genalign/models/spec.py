"""`FamilySpec`: what a model family is, declared once beside its policy.

Where it fits: config checks, the rollout collector, export and the model card need to know
facts about a family before (or without) loading it: does it sample tokens or a flow, images or
video, which sizes, which CFG options it reads, how a trained adapter is exported. Each family
declares one `SPEC = FamilySpec(...)` (a plain frozen dataclass: importing it loads no
weights, and family modules keep their heavy imports inside functions), the registry maps
`model.family` names to those specs, and every caller asks `family_spec(name)` instead of
keeping its own table of family names. A user's family is a module (or a folder) holding a
policy class and a `FamilySpec`, named in config by its dotted path and allowed in
`model.allow_import`.

A family is a folder (`models/<family>/`, the spec's `package`): its policy and `SPEC`, its
tiny builder, and the files the memory plan and the GPU suite read, which the spec finds for
them (`architecture_files`, `calibration`):

    models/<family>/
        __init__.py         SPEC and the policy class (what the registry line names)
        policy.py           the policy and its SPEC
        tiny.py             the tiny random model (SPEC.tiny_builder)
        architectures/      <owner>--<name>.json: the published configs of each checkpoint
        calibration.json    activation bytes per token (benchmarks/calibrate_memory.py)
"""

from __future__ import annotations

import importlib
import importlib.util
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from genalign.config.registry import RegistryError, import_problem, is_dotted_path
from genalign.models.registry import MODEL_FAMILIES

SAMPLERS = ("flow", "token")
MEDIA = ("image", "video")
EXPORTS = ("diffusers", "peft", "checkpoint", "none")
ARCHITECTURES = "architectures"
"""The folder of a family's published architecture files (`<owner>--<name>.json` per hub id)."""
CALIBRATION = "calibration.json"
CALIBRATION_KEYS = ("rollout_peak", "replay", "replay_compiled", "replay_checkpointed", "measured_on")
"""What a calibration.json holds (docs/memory_plan.md, "Calibrating a family"): bytes per
transformer token per block per hidden unit at bfloat16 compute, measured at the real width (2
blocks; the toy whole) — `replay` kept for backward by eager kernels under CUDA's autocast
policy, `replay_compiled` by the regionally compiled graph, `replay_checkpointed` with gradient
checkpointing (eager), `rollout_peak` the peak working bytes of a no-grad forward (eager) — and
`measured_on`, what was measured (the plan prints it)."""
OUTSIDE_BLOCKS = "replay_outside_blocks"
"""An optional calibration key: bytes kept for backward per image token outside the repeated
blocks, counted once per token (NextStep-1's flow head, which walks each token through its head
steps: far more than a block keeps, so folding it into the per-block bytes would scale it by the
depth). A family without it folds such terms into the blocks' bytes."""
OUTSIDE_BLOCKS_STEPS = "replay_outside_blocks_num_steps"
"""The rollout.num_steps `OUTSIDE_BLOCKS` was measured at, when that term grows with the walk
(NextStep-1's head: replay keeps every stochastic head step, num_steps − 1 a token, its last step
being deterministic): the plan scales the term by the run's stochastic steps over the
calibration's. Absent: the term does not depend on rollout.num_steps."""


class MissingCalibration(ValueError):
    """A family without a usable calibration.json: the one-line reason, naming the file."""


@dataclass(frozen=True)
class FamilySpec:
    """The facts about a model family that callers outside the family read."""

    name: str
    """Short name (`model.family`, messages, the model card's tags); the policy's `family`."""
    policy: str
    """"package.module:Class" of the policy class (resolved by `policy_class()`, lazily): a
    `FlowPolicy` when `sampler` is "flow", a `TokenPolicy` when it is "token"."""
    sampler: str = "flow"
    """"flow": an SDE over latents with per-step log-probs (the flow algorithms); "token":
    image tokens drawn autoregressively (the token algorithms, rollout.temperature)."""
    media: str = "image"
    """"image" ([B, 3, H, W] to rewards) or "video" ([B, F, 3, H, W]; model.num_frames > 1
    allowed: the exact frame rule is the checkpoint VAE's, checked when it loads)."""
    size_multiple: int = 16
    """rollout.height/width must be multiples of this: pixels per latent patch (VAE factor x
    transformer patch x latent packing) or per image token."""
    fixed_size: int | None = None
    """The only side length the family generates (square), or None for any multiple of
    `size_multiple` (a checkpoint's own limits are checked when it loads)."""
    negative_prompt: bool = False
    """Whether CFG's negative branch reads model.negative_prompt (else it must stay empty)."""
    guidance_embedding: bool = False
    """Whether the transformer may carry a distilled-guidance embedding (model.embedded_guidance);
    whether the loaded one does is checked when it loads."""
    text_encoders: bool = True
    """Whether the policy has separate frozen text encoders (`text_encoders`) that
    model.offload_text_encoders can park on the CPU."""
    draws_text: bool = True
    """Whether the model can draw legible text (a text reward on one that cannot is cautioned)."""
    experts: bool = False
    """Whether a checkpoint of the family may hold several denoiser experts switched at a
    boundary timestep (Wan 2.2 T2V-A14B): model.experts and model.low_noise_guidance_scale
    apply; whether the loaded one does is checked when it loads."""
    gradient_checkpointing: bool = True
    """Whether model.gradient_checkpointing works (offered by the memory plan as a lever)."""
    differentiable_decode: bool = False
    """Whether the policy has `decode_pixels(latents)`: float images in [0, 1] that carry the
    gradient back to the latents (the decoder's weights frozen). The reward-feedback algorithms
    back-propagate a reward through it; the config refuses them on a family without one."""
    decode_reads_condition: bool = False
    """Whether the condition gives latents of the video (Wan 2.2 TI2V-5B's image-to-video, whose
    first latent frame is the encoded image), so decoding needs the condition: the policy's
    `decode_conditioned(latents, cond)` puts them before the sampled latents, or over them where
    model.given_frames=stepped samples them too (which only such a family reads). Rollout and
    evaluation decode through `models.base.decode_samples`, which calls it."""
    split_cfg: bool = True
    """Whether model.cfg_batch=split is read (else both CFG branches always run as one batch)."""
    export: str = "diffusers"
    """How a trained LoRA is exported: "diffusers" (a `load_lora_weights` adapter for
    `pipeline_class`), "peft" (a peft adapter onto the transformers class `pipeline_class`),
    "checkpoint" (the whole model, a LoRA merged into it, in the layout the family's own loader
    and `pipeline_class` read: the policy's `export_checkpoint(directory, trained)` and
    `checkpoint_usage(location, cfg)`; in the final checkpoint only, `model/`), "none" (no loader
    outside genalign takes it; only checkpoints)."""
    pipeline_class: str | None = None
    """The class that loads the base model outside genalign: the diffusers pipeline ("diffusers":
    also what a local model.path's model_index.json must name) or the transformers class ("peft");
    None for "checkpoint" (the policy's `checkpoint_usage` names the loader) and "none"."""
    hub_weights: bool = True
    """Whether model.path may be a Hugging Face Hub id (else only local directories)."""
    builtin_path: str | None = None
    """A model.path value that names weights shipped inside genalign (toy: "builtin"): no
    directory or Hub check applies to it."""
    builtin_dir: str | None = None
    """"package.module:function" (no arguments -> Path) of the folder `builtin_path` names,
    for checks that read the builtin model's configs (`weights_dir`)."""
    loads_pipelines: tuple[str, ...] = ()
    """Other pipeline classes a local model.path's model_index.json may name, whose checkpoints
    `pipeline_class` loads too (Wan 2.2 TI2V-5B: one repository for text- and image-to-video,
    published as a WanPipeline, loaded by WanImageToVideoPipeline for image-to-video)."""
    tiny_builder: str | None = None
    """"package.module:function" (seed -> object with `save_pretrained`) of a tiny random model
    with the family's architecture, built from configs for tests and offline smoke runs."""
    source_images: int = 0
    """How many source images a prompt may carry beside its text (data/source_images.py): 0 for
    a text-to-image or text-to-video family; > 0 for an image-conditioned one (FLUX.1 Kontext:
    1), whose policy is also a `SourceEncoder`. A manifest with more is refused before loading."""
    source_count: str | None = None
    """"package.module:function" (the transformer's config, a mapping -> int) of how many source
    images each prompt must carry for a checkpoint of the family, where its checkpoints differ (Wan
    I2V: 1; Wan 2.1 FLF2V, whose transformer embeds a first and a last frame: 2). The policy asks it
    when it loads; the config check asks it of the checkpoint's architecture (the file shipped for
    a hub id, or a local directory's configs) before loading. None: any count up to `source_images`."""
    source_required: bool = False
    """Whether every prompt must carry its `source_images` (an image-to-video family animates its
    source: Wan I2V); False where a prompt may come without (FLUX.1 Kontext also draws from text
    alone). A manifest with a row that carries none is refused before loading."""
    pipeline_source_size: str | None = None
    """"package.module:function" ((height, width) of a source -> (height, width)) of the size the
    family's diffusers pipeline resizes a source image to before its VAE encodes it (Qwen-Image-
    Edit's about 1024² pixels): what model.source_resolution=pipeline uses, in the policy and in
    the memory plan (`source_size`). None: the family encodes sources at the run's size only."""
    size_rule: str | None = None
    """"package.module:function" ((model.path, height, width) -> a one-line problem naming
    rollout.height/width, or None) of a size rule the family's pipeline adds to `size_multiple`
    (HunyuanVideo 1.5 I2V makes only its size buckets): checked with the config when the
    checkpoint's configs can be read (a shipped architecture file, a local directory), and again
    when the model loads. None: no rule beyond `size_multiple` / `fixed_size`."""
    tiny_variants: tuple[tuple[str, str], ...] = ()
    """(hub id, "package.module:function") pairs: the tiny model of a checkpoint whose form
    differs from `tiny_builder`'s (Wan 2.2's two experts, TI2V-5B's VAE), built from that hub
    id's published configs shrunk; `build_tiny(seed, path)` picks it for `path`."""
    unread_keys: tuple[str, ...] = ()
    """Config keys, dotted from the config's root ("rollout.num_steps", "eval.num_steps"), that
    the family never reads: settings of a sampler it does not have (Janus-Pro draws image tokens:
    no denoising steps, SDE noise or transition kernel). A config setting one away from its
    default is refused before any model loads, naming the key and `unread_reason`, rather than
    ignored; helpers that set keys for every family (the GPU suite, the tests) leave these out
    (`reads`)."""
    unread_reason: str = ""
    """Why the family does not read its `unread_keys`, in a few words (the refusal says it)."""
    rollout_sampler: str | None = None
    """"package.module:function" (RolloutConfig -> list of problems) of a family whose policy
    takes its sampler's rollout.num_steps / noise_level / kernel once, when it is built, rather
    than per call (NextStep-1's flow head: the token path's calls carry only guidance and
    temperature). `build_policy` hands every copy of the policy (trainer, Ray workers,
    evaluation) `policy.configure_rollout(cfg.rollout)`; the config check calls the function
    first, for the values that sampler cannot run. None: the family reads them per call."""
    package: str | None = None
    """The family's folder, named as the importable package it is ("genalign.models.sd3"): beside
    the policy it holds `architectures/` (the published configs of the checkpoints the family
    loads, `<owner>--<name>.json` per hub id; the memory plan counts parameters from them, the
    GPU suite builds the real shapes) and `calibration.json` (`CALIBRATION_KEYS`: the memory
    plan's activation bytes). None: a family without such files (a user's one-module family);
    the memory plan then refuses to plan it, saying which file is missing."""

    def __post_init__(self) -> None:
        for field_name, value, choices in (
            ("sampler", self.sampler, SAMPLERS),
            ("media", self.media, MEDIA),
            ("export", self.export, EXPORTS),
        ):
            if value not in choices:
                raise ValueError(f"FamilySpec {self.name!r}: {field_name}={value!r}; choose one of {choices}")
        if self.export in ("diffusers", "peft") and not self.pipeline_class:
            raise ValueError(f"FamilySpec {self.name!r}: export={self.export!r} needs pipeline_class")
        if self.source_images < 0 or (self.source_required and not self.source_images):
            raise ValueError(f"FamilySpec {self.name!r}: source_images must be >= 0 (>= 1 with source_required)")
        if self.size_multiple < 1 or (self.fixed_size is not None and self.fixed_size % self.size_multiple):
            raise ValueError(f"FamilySpec {self.name!r}: fixed_size must be a multiple of size_multiple >= 1")
        if self.unread_keys and not self.unread_reason:
            raise ValueError(f"FamilySpec {self.name!r}: unread_keys needs unread_reason (the refusal says why)")

    @property
    def pipeline_tag(self) -> str:
        """The Hub task of what the family generates: the exported model card's `pipeline_tag`."""
        if self.source_images:
            return "image-to-video" if self.media == "video" else "image-to-image"
        return "text-to-video" if self.media == "video" else "text-to-image"

    def source_size(self, source_resolution: str, height: int, width: int) -> tuple[int, int]:
        """(height, width) the VAE sees a (height, width) source image at under
        model.source_resolution=`source_resolution` ("run": as it is; "pipeline": the pipeline's
        resize, `pipeline_source_size`)."""
        if source_resolution == "run":
            return height, width
        if self.pipeline_source_size is None:
            raise ValueError(
                f"model.source_resolution={source_resolution}: model.family={self.name} has no pipeline resize"
            )
        return _import(self.pipeline_source_size)(height, width)

    def sources_per_prompt(self, transformer_config) -> int | None:
        """`source_count` asked of a checkpoint's transformer config; None where the family's
        checkpoints do not differ."""
        return None if self.source_count is None else int(_import(self.source_count)(transformer_config))

    def rollout_sampler_problems(self, rollout: Any) -> list[str]:
        """What the family's build-time sampler (`rollout_sampler`) cannot run of `rollout`
        ([] for a family that reads its rollout keys per call)."""
        return _import(self.rollout_sampler)(rollout) if self.rollout_sampler else []

    def reads(self, key: str) -> bool:
        """Whether the family reads config key `key` (dotted from the root): False for its `unread_keys`."""
        return key not in self.unread_keys

    def reads_override(self, override: str) -> bool:
        """Whether a command-line override ("rollout.num_steps=4", "+key=value") sets a key the
        family reads: what helpers that apply one list of overrides to every family filter by."""
        return self.reads(override.split("=", 1)[0].lstrip("+~"))

    def policy_class(self) -> Any:
        """The policy class (imports its module)."""
        return _import(self.policy)

    def weights_dir(self, path: str) -> Path:
        """The folder model.path=`path` loads from: the builtin folder for `builtin_path`, else
        `path` itself (a Hub id is no folder here: it does not exist on disk)."""
        if path == self.builtin_path and self.builtin_dir:
            return Path(_import(self.builtin_dir)())
        return Path(path).expanduser()

    @property
    def folder(self) -> Path | None:
        """The directory of `package` (None without one); found without importing the package."""
        if self.package is None:
            return None
        try:
            found = importlib.util.find_spec(self.package)
        except ModuleNotFoundError:  # a parent package is missing
            found = None
        if found is None or found.origin is None or not found.submodule_search_locations:
            raise ValueError(f"FamilySpec {self.name!r}: package={self.package!r} is not an importable package")
        return Path(found.origin).parent

    def architecture_files(self) -> tuple[Path, ...]:
        """The family's architecture files, sorted by name (empty without a folder): one per hub id
        (`<owner>--<name>.json`); the first also gives the family's geometry and components for a
        local directory and for weights shipped inside genalign (`builtin_path`)."""
        folder = self.folder
        return tuple(sorted((folder / ARCHITECTURES).glob("*.json"))) if folder is not None else ()

    def calibration(self) -> dict:
        """The family's `calibration.json` (`CALIBRATION_KEYS`); `MissingCalibration` naming the
        file, or the missing folder, when there is none or a key is missing."""
        folder = self.folder
        if folder is None:
            raise MissingCalibration(
                f"model family {self.name!r} has no calibration: its FamilySpec names no "
                f"package (the family's folder) holding {CALIBRATION}"
            )
        path = folder / CALIBRATION
        if not path.is_file():
            raise MissingCalibration(f"model family {self.name!r} has no calibration: {path} does not exist")
        try:
            body = json.loads(path.read_text())
        except json.JSONDecodeError as error:
            raise MissingCalibration(f"{path}: not valid JSON ({error})") from None
        missing = [key for key in CALIBRATION_KEYS if key not in body]
        if missing:
            raise MissingCalibration(f"{path}: missing {', '.join(missing)} (a calibration holds {CALIBRATION_KEYS})")
        return body

    def size_problem(self, path: str, height: int, width: int) -> str | None:
        """`size_rule`'s problem with a (height, width) run of model.path=`path`, or None."""
        return _import(self.size_rule)(path, height, width) if self.size_rule else None

    def build_tiny(self, seed: int = 0, path: str | None = None) -> Any:
        """The tiny random model (an object with `save_pretrained`) of the family, or of the form
        hub id `path` has (`tiny_variants`); ValueError without a builder."""
        variant = dict(self.tiny_variants).get(path or "")
        if variant is not None:
            return _import(variant)(seed)
        if self.tiny_builder is None:
            raise ValueError(f"model family {self.name!r} declares no tiny builder")
        return _import(self.tiny_builder)(seed)


def _import(target: str) -> Any:
    module_name, attr = target.split(":", 1)
    return getattr(importlib.import_module(module_name), attr)


def family_spec(name: str, allow_import: list[str] | tuple[str, ...] = ()) -> FamilySpec:
    """The spec of `model.family=name`: a registered name, or a dotted "package.module:SPEC"
    path listed in `allow_import` (model.allow_import). Raises `RegistryError` otherwise."""
    spec = MODEL_FAMILIES.resolve(name, allow_import)
    if not isinstance(spec, FamilySpec):
        raise RegistryError(f"model.family: {name!r} is a {type(spec).__name__}, not a FamilySpec")
    return spec


def spec_or_none(name: str, allow_import: list[str] | tuple[str, ...] = ()) -> FamilySpec | None:
    """The spec of `model.family=name`, or None when the name does not resolve or its allowed
    module does not import: validation reports those once, under model.family, so the checks
    that only read the spec skip them instead of repeating the error."""
    if is_dotted_path(name) and name in allow_import and import_problem("model.family", name, FamilySpec):
        return None
    try:
        return family_spec(name, allow_import)
    except RegistryError:
        return None


def families_with(predicate) -> list[str]:
    """The registered family names whose spec satisfies `predicate` (for messages)."""
    return [name for name in MODEL_FAMILIES.names() if predicate(family_spec(name))]
