"""Checks of the files a config names, run before anything is built.

Where it fits: `load_config(..., check_files=True)` (the CLI's `train` and `config`) runs
`file_problems` on a config that already passed `validate`, and `genalign eval` runs it on a
checkpoint's config. A missing manifest, a model directory that is not there, an output_dir
that is a file, or a corrupt checkpoint to resume from is then one line naming the key, not a
traceback after a multi-GB model has loaded. The one machine fact checked here is that an
explicit CUDA `model.device` exists. `genalign config --no-check-files` skips this
when composing a config for another machine.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from genalign.config.errors import ConfigError
from genalign.config.registry import import_problem, is_dotted_path
from genalign.config.safe_yaml import safe_load_unique
from genalign.config.schema import ExperimentConfig
from genalign.data.preferences import read_image_prompts, read_preferences
from genalign.data.prompts import ManifestError, load_manifest
from genalign.data.source_images import sources_of
from genalign.hub import HUB_ID, is_hub_id, is_hub_reference
from genalign.models.architecture import architecture_source
from genalign.models.registry import MODEL_FAMILIES
from genalign.models.spec import spec_or_none
from genalign.preflight.reward_contract import source_problems, user_reward_problems
from genalign.preflight.stored_config import allow_lists, config_from_checkpoint
from genalign.preflight.values import selected_reward_options
from genalign.rewards.config import REWARD_PATH_OPTIONS
from genalign.rewards.registry import REWARD_OPTIONS
from genalign.runs.checkpoint import checkpoint_problems
from genalign.runs.run_dir import RunDirError, decide_start


def file_problems(
    cfg: ExperimentConfig,
    manifests: tuple[str, ...] = ("manifest", "eval_manifest"),
    output_dir: bool = True,
    resume: bool = True,
) -> list[str]:
    """Every problem with the files `cfg` names (empty when all are usable). Manifests are read
    in full (they are small; a bad row fails here rather than after the model has loaded)."""
    problems: list[str] = []
    carries_sources: dict[str, bool] = {}  # manifest -> whether its rows name source images
    for name in manifests:
        try:  # rows, and the source images an editing prompt names: files, images, the run's size
            examples = load_manifest(
                getattr(cfg.data, name), f"data.{name}", source_size=manifest_image_size(cfg, name)
            )
        except ManifestError as exc:
            problems.append(str(exc) + (f"; {exc.hint}" if exc.hint else ""))
        else:
            problems += source_family_problems(cfg, name, examples)
            carries_sources[name] = any(sources_of(example.metadata) for example in examples)
    problems += source_problems(cfg, carries_sources)
    if cfg.data.preference_manifest is not None:
        try:  # every row, image file and image size, before the model loads
            read_preferences(cfg.data.preference_manifest, size=(cfg.rollout.height, cfg.rollout.width))
        except ManifestError as exc:
            problems.append(str(exc) + (f"; {exc.hint}" if exc.hint else ""))
    if cfg.data.image_manifest is not None:
        try:  # the same for flow-matching SFT's image–prompt rows
            read_image_prompts(cfg.data.image_manifest, size=(cfg.rollout.height, cfg.rollout.width))
        except ManifestError as exc:
            problems.append(str(exc) + (f"; {exc.hint}" if exc.hint else ""))
    problems += reward_manifest_problems(cfg, manifests)
    problems += model_path_problems(cfg.model.family, cfg.model.path, cfg.model.allow_import)
    problems += offline_hub_problems(cfg)
    problems += device_problems(cfg.model.device)
    problems += reward_path_problems(cfg)
    imports = import_problems(cfg)
    problems += imports or user_reward_problems(cfg)  # the user's scorer classes against the reward contract
    if output_dir:
        directory_problems = output_dir_problems(cfg.trainer.output_dir)
        problems += directory_problems or run_dir_problems(cfg)
    # auto: chosen by run_dir; hf://: downloaded by run_dir when the run starts (its form is validate's)
    if (
        resume
        and cfg.trainer.resume_from
        and cfg.trainer.resume_from != "auto"
        and not is_hub_reference(cfg.trainer.resume_from)
    ):
        problems += resume_problems(cfg)
    return problems


def manifest_image_size(cfg: ExperimentConfig, manifest: str) -> tuple[int, int]:
    """(height, width) the source images of data.`manifest` must have: the rollout's, or for
    data.eval_manifest the evaluation's (eval.height / eval.width, null = the rollout's)."""
    height, width = cfg.rollout.height, cfg.rollout.width
    if manifest == "eval_manifest":
        height, width = cfg.eval.height or height, cfg.eval.width or width
    return height, width


def source_family_problems(cfg: ExperimentConfig, manifest: str, examples: list) -> list[str]:
    """A manifest whose prompts carry more source images than model.family takes (a text-only
    family takes none: its `FamilySpec.source_images`), or a prompt without one for a family
    that needs them (`FamilySpec.source_required`)."""
    spec = spec_or_none(cfg.model.family, cfg.model.allow_import)
    if spec is not None and spec.source_required:
        bare = next((example for example in examples if not sources_of(example.metadata)), None)
        if bare is not None:
            return [
                f"data.{manifest}: {bare.source} carries no source image; model.family={cfg.model.family} "
                f"needs one a prompt (a .jsonl row's \"source_image\", relative to the manifest's folder)"
            ]
    required = checkpoint_source_count(spec, cfg.model.path) if spec is not None else None
    wrong = next((e for e in examples if len(sources_of(e.metadata)) != required), None) if required else None
    if wrong is not None:
        return [
            f"data.{manifest}: {wrong.source} carries {len(sources_of(wrong.metadata))} source image(s); "
            f"model.path={cfg.model.path} takes {required} a prompt (its transformer's config; a .jsonl row's "
            f'"source_image", or "source_images": [...] in order, relative to the manifest\'s folder)'
        ]
    carried = max((len(sources_of(example.metadata)) for example in examples), default=0)
    if spec is None or carried <= spec.source_images:
        return []
    takes = f"takes {spec.source_images}" if spec.source_images else "is text-conditioned only (no source images)"
    first = next(example for example in examples if len(sources_of(example.metadata)) > spec.source_images)
    return [
        f"data.{manifest}: {first.source} carries {carried} source image(s) per prompt; "
        f"model.family={cfg.model.family} {takes} (an editing family such as flux_kontext reads them)"
    ]


def checkpoint_source_count(spec, path: str) -> int | None:
    """The source images a prompt must carry for the checkpoint `path` (`FamilySpec.source_count`
    asked of its transformer's config, from its architecture: no weights load), or None where the
    family's checkpoints do not differ or nothing describes this one."""
    if spec.source_count is None:
        return None
    found = architecture_source(spec, path)
    if found is None or "transformer" not in found[0]:
        return None
    return spec.sources_per_prompt(found[0]["transformer"]["config"])


MAX_ROW_PROBLEMS = 5
"""Bad rows reported per scorer and manifest (the count of the rest follows)."""


def reward_manifest_problems(cfg: ExperimentConfig, manifests: tuple[str, ...]) -> list[str]:
    """Rows a selected scorer would be handed but cannot score, from its options'
    `manifest_problems(examples)` (GenEval: rows without GenEval metadata, classes GenEval does
    not have): the training reward scores data.manifest and data.eval_manifest, gold rewards and
    quality metrics data.eval_manifest. Found here, not mid-step."""
    problems: list[str] = []
    for key, name, options in selected_reward_options(cfg):
        if not hasattr(options, "manifest_problems"):
            continue
        scored = manifests if key == "reward.components" else [m for m in manifests if m == "eval_manifest"]
        for manifest in scored:
            try:
                examples = load_manifest(getattr(cfg.data, manifest), f"data.{manifest}")
            except ManifestError:
                continue  # file_problems reports the manifest itself
            rows = options.manifest_problems(examples)
            more = f" (and {len(rows) - MAX_ROW_PROBLEMS} more rows)" if len(rows) > MAX_ROW_PROBLEMS else ""
            problems += [f"{key}.{name} cannot score data.{manifest}: {row}" for row in rows[:MAX_ROW_PROBLEMS]]
            if more:
                problems[-1] += more
    return problems


def model_path_problems(family: str, path: str, allow_import: list[str] | tuple[str, ...] = ()) -> list[str]:
    """model.path must be an existing directory when it is local; a hub id is left to the loader."""
    spec = spec_or_none(family, allow_import)
    if spec is not None and path == spec.builtin_path:
        return []
    local = Path(path).expanduser()
    if local.exists():
        if not local.is_dir():
            return [f"model.path: {path} is a file; point it at a model directory"]
        return pipeline_problems(family, local, allow_import)
    hub_weights = spec is None or spec.hub_weights
    if path.startswith(("/", "./", "../", "~")) or not HUB_ID.match(path) or not hub_weights:
        hint = (
            "use a hub id 'org/name' or a directory written by save_pretrained"
            if hub_weights
            else local_only_hint(spec)
        )
        return [f"model.path: local directory {path} does not exist; {hint}"]
    return []


def local_only_hint(spec) -> str:
    """What a family that takes no Hub id loads instead (its builtin path, or a directory)."""
    builtin = f"model.path={spec.builtin_path} or " if spec.builtin_path else ""
    return f"use {builtin}a local model directory (model.family={spec.name} loads no Hub id)"


def _family_pipeline(family: str, allow_import: list[str] | tuple[str, ...] = ()) -> str | None:
    """The diffusers pipeline class a family loads (None: not a diffusers family)."""
    spec = spec_or_none(family, allow_import)
    return spec.pipeline_class if spec is not None and spec.export == "diffusers" else None


def pipeline_problems(family: str, local: Path, allow_import: list[str] | tuple[str, ...] = ()) -> list[str]:
    """A local model.path of a diffusers family must hold that family's pipeline: its
    model_index.json names the class (from_pretrained would fail deep inside, or worse, load
    SD3 weights into the FLUX code and suggest the wrong fix)."""
    expected = _family_pipeline(family, allow_import)
    if expected is None:
        return []
    index = local / "model_index.json"
    if not index.is_file():
        return [
            f"model.path: {local} is not a diffusers pipeline directory (no model_index.json); "
            f"model.family={family} loads a {expected} written by save_pretrained, or a hub id"
        ]
    try:
        found = json.loads(index.read_text(encoding="utf-8")).get("_class_name")
    except (ValueError, OSError, AttributeError) as exc:
        return [f"model.path: {index} cannot be read as JSON ({str(exc).splitlines()[0]})"]
    spec = spec_or_none(family, allow_import)
    if found == expected or (spec is not None and found in spec.loads_pipelines):
        return []

    matching = [name for name in MODEL_FAMILIES.names() if _family_pipeline(name) == found]
    fix = (
        f"use a model.family={matching[0]} recipe for it"
        if matching
        else "genalign has no model family for that pipeline"
    )
    return [
        f"model.path: {local} holds a {found} (its model_index.json), not the {expected} that "
        f"model.family={family} loads; point model.path at {family} weights, or {fix}"
    ]


REWARD_HUB_OPTIONS = {
    "pickscore": ("model_name", "processor_name"),
    "clip_score": ("model_name", "processor_name"),
    "aesthetic": ("model_name", "processor_name"),
    "geneval": ("detector_name", "clip_name"),
    "geneval_accuracy": ("detector_name", "clip_name"),
    "hpsv2": ("base_model",),
    "hpsv21": ("base_model",),
    "image_reward": ("tokenizer_name",),
}
"""Scorer options that name a hub id (or a local directory), with the registered default used
when the option is not set."""


def offline_hub_problems(cfg: ExperimentConfig) -> list[str]:
    """With HF_HUB_OFFLINE set, a hub id (model.path, a scorer's model) must already be in the
    Hugging Face cache: otherwise the run would fail only when it loads, after the model (or
    the other rewards) had loaded. Online, a missing repo is the loader's to report."""
    from huggingface_hub import constants

    if not constants.HF_HUB_OFFLINE:
        return []
    # (key, hub id, revision): the model is wanted at model.revision (Cosmos' diffusers weights
    # live on a branch, so the default branch being cached would not do), scorers at their default
    spec = spec_or_none(cfg.model.family, cfg.model.allow_import)
    hub_model = spec is not None and spec.hub_weights and cfg.model.path != spec.builtin_path
    wanted = [("model.path", cfg.model.path, cfg.model.revision)] if hub_model else []
    used = local_scorers(cfg)
    for name in sorted(used & set(REWARD_HUB_OPTIONS)):
        defaults = _option_defaults(name)
        for option in REWARD_HUB_OPTIONS[name]:
            value = cfg.reward.kwargs.get(name, {}).get(option, defaults.get(option))
            if isinstance(value, str):
                wanted.append((f"reward.kwargs.{name}.{option}", value, None))
    return [
        f"{key}={repo!r}{'' if revision is None else f' (revision {revision!r})'}: HF_HUB_OFFLINE is set and "
        f"this hub id is not in the Hugging Face cache {constants.HF_HUB_CACHE!r}; download it where there is "
        f"network (`hf download {repo}{'' if revision is None else f' --revision {revision}'}`, same HF_HOME) "
        "or point the key at a local directory written by save_pretrained"
        for key, repo, revision in wanted
        if is_hub_id(repo) and not hub_cached(repo, revision)
    ]


def _option_defaults(reward: str) -> dict[str, object]:
    import dataclasses
    import importlib

    module_name, attr = REWARD_OPTIONS[reward].split(":")
    options = getattr(importlib.import_module(module_name), attr)  # scorer modules import no model
    return {f.name: f.default for f in dataclasses.fields(options) if f.default is not dataclasses.MISSING}


def hub_cached(repo: str, revision: str | None = None) -> bool:
    """A snapshot of `repo` at `revision` (None: the default branch) is in the cache: a
    pipeline's model_index.json or a model's config.json."""
    from huggingface_hub import try_to_load_from_cache

    return any(
        isinstance(try_to_load_from_cache(repo, name, revision=revision), str)
        for name in ("model_index.json", "config.json")
    )


def device_problems(device: str) -> list[str]:
    """An explicit CUDA (or Apple mps) `model.device` must exist on this machine (a machine
    fact, so it lives with the file checks that `genalign config --no-check-files` skips)."""
    import torch

    if device.startswith("mps"):
        mps = getattr(torch.backends, "mps", None)
        if mps is None or not mps.is_available():
            return [
                f"model.device={device}: this machine has no Apple mps device (or this torch build lacks it); "
                "use model.device=auto or cpu"
            ]
        return []
    if not device.startswith("cuda"):
        return []

    count = torch.cuda.device_count()
    index = int(device.partition(":")[2] or 0)
    if index >= count:
        seen = f"{count} CUDA device(s) are visible" if count else "no CUDA device is visible"
        return [f"model.device={device}: {seen}; use model.device=auto or cpu, or check CUDA_VISIBLE_DEVICES"]
    return []


def import_problems(cfg: ExperimentConfig) -> list[str]:
    """Each dotted reward path the user allowed (reward.allow_import) must import, have the
    attribute and name a class: checked with the files, before a model loads (validation
    itself never imports the user's code)."""
    named = (
        ("reward.components", cfg.reward.components),
        ("eval.gold_rewards", cfg.eval.gold_rewards),
        ("eval.quality_metrics", cfg.eval.quality_metrics),
    )
    return [
        problem
        for key, names in named
        for name in names
        if is_dotted_path(name) and name in cfg.reward.allow_import
        for problem in [import_problem(key, name)]
        if problem
    ]


def local_scorers(cfg: ExperimentConfig) -> set[str]:
    """Scorers this process will build: the weighted components and gold rewards, none with runtime=http."""
    if cfg.reward.runtime == "http":
        return set()
    return set(cfg.reward.active_components()) | set(cfg.eval.active_gold_rewards())


def reward_path_problems(cfg: ExperimentConfig) -> list[str]:
    """reward.kwargs.<name>.<path option> must exist for every scorer that will be built here;
    with reward.runtime=http the scorers (and their files) are the server's, but the token must be set."""
    if cfg.reward.runtime == "http" and not os.environ.get(cfg.reward.token_env):
        return [
            f"reward.runtime=http: ${cfg.reward.token_env} (reward.token_env) is not set; export the reward "
            f"server's token"
        ]
    problems = []
    used = local_scorers(cfg)
    for name, option in REWARD_PATH_OPTIONS.items():
        value = cfg.reward.kwargs.get(name, {}).get(option)
        if name in used and isinstance(value, str) and value != "builtin" and not Path(value).expanduser().exists():
            problems.append(f"reward.kwargs.{name}.{option}: {value} does not exist")
    return problems


def output_dir_problems(output_dir: str) -> list[str]:
    """trainer.output_dir must be (or be creatable as) a writable directory."""
    path = Path(output_dir).expanduser()
    if path.exists():
        if not path.is_dir():
            return [f"trainer.output_dir: {path} is a file, not a directory; choose another trainer.output_dir"]
        if not os.access(path, os.W_OK | os.X_OK) or not _can_create_in(path):
            return [f"trainer.output_dir: {path} is not writable; fix its permissions or choose another directory"]
        return []
    parent = path.absolute().parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir():
        return [f"trainer.output_dir: cannot create {path}: {parent} is a file"]
    if not os.access(parent, os.W_OK | os.X_OK) or not _can_create_in(parent):
        return [f"trainer.output_dir: cannot create {path}: {parent} is not writable"]
    return []


def _can_create_in(directory: Path) -> bool:
    """Whether a directory can really be made in `directory`: os.access says yes to root on
    /sys or /proc, where mkdir then fails. The probe is removed at once."""
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".genalign-probe-", dir=directory))
    except OSError:
        return False
    return True


def run_dir_problems(cfg: ExperimentConfig) -> list[str]:
    """What the run-directory rules (runs/run_dir.py) refuse: an existing run without
    trainer.overwrite, a resume that moves backwards or passes over newer checkpoints."""
    try:
        decide_start(cfg)
    except RunDirError as exc:
        return exc.problems
    return []


def resume_problems(cfg: ExperimentConfig) -> list[str]:
    """The checkpoint at trainer.resume_from: complete, readable, and a config that validates
    with the user's `reward.allow_import`, `model.allow_import` and `algorithm.allow_import`
    (never the checkpoint's own)."""
    key = "trainer.resume_from"
    problems = checkpoint_problems(cfg.trainer.resume_from, key)
    if problems:
        return problems
    config_path = Path(cfg.trainer.resume_from).expanduser() / "config.yaml"
    try:
        config_from_checkpoint(
            safe_load_unique(config_path.read_text(encoding="utf-8")),
            f"{key}: {config_path}",
            allow_lists(cfg),
            check_machine=False,
        )
    except ConfigError as exc:
        return exc.problems
    return []
