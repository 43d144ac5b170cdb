"""Settings that are valid and run, but that a user would want to hear about first.

Where it fits: after `load_config` has accepted a config. `genalign config` prints each line
as `genalign: warning: ...`; the trainer logs each as a warning before it builds anything (so
it is in train.log). Nothing here refuses a run: a negated reward is a real experiment (the
negated controls of the learning tests), a one-prompt manifest a real debugging run, and even
settings that are surely unintended (one sample per group, a LoRA rank past the layer width,
a run written into the filesystem root) can be meant by someone who knows.
"""

from __future__ import annotations

import json
from pathlib import Path

import genalign.version
from genalign.algorithms.registry import algorithm_class
from genalign.config.schema import ExperimentConfig
from genalign.data.prompts import ManifestError, load_manifest
from genalign.models.architecture import architecture_source
from genalign.models.spec import family_spec, spec_or_none
from genalign.placement import resources as placement_resources  # environment_facts looked up per call

TEXT_REWARDS = ("ocr",)
"""Rewards that read text drawn in the image."""


def config_cautions(cfg: ExperimentConfig) -> list[str]:
    """One line per valid-but-surprising setting, naming the key."""
    cautions = []
    for key, weights in (("reward.components", cfg.reward.components), ("eval.gold_rewards", cfg.eval.gold_rewards)):
        for name, weight in weights.items():
            if weight < 0:
                cautions.append(
                    f"{key}.{name}={weight:g} is negative: the run learns to lower {name}'s score "
                    "(as a negated control does); use a positive weight to raise it"
                )
    for name in TEXT_REWARDS:
        if cfg.reward.components.get(name) and not _draws_text(cfg):
            cautions.append(
                f"reward.components.{name} with model.family={cfg.model.family}: this model never draws "
                f"text, so {name} scores every image about the same and the run learns nothing from it"
            )
    online = algorithm_class(cfg).data_source(cfg.algorithm) == "online"
    prompts = _manifest_size(cfg.data.manifest) if online else None
    if prompts is not None and prompts < cfg.rollout.rollout_batch_size:
        cautions.append(
            f"data.manifest holds {prompts} prompt(s) but rollout.rollout_batch_size="
            f"{cfg.rollout.rollout_batch_size} prompts are drawn per step: the same prompts repeat "
            "within every step as separate groups"
        )
    cautions += _gpu_cautions(cfg)
    cautions += _group_size_cautions(cfg) + _lora_rank_cautions(cfg) + _output_dir_cautions(cfg.trainer.output_dir)
    return cautions


def _group_size_cautions(cfg: ExperimentConfig) -> list[str]:
    """rollout.n=1 with per-group normalisation: every advantage is its own group's mean minus
    itself, 0, so an online run trains nothing (trainer.max_idle_steps stops it later)."""
    online = algorithm_class(cfg).data_source(cfg.algorithm) == "online"
    if cfg.rollout.n != 1 or not cfg.algorithm.advantage.per_prompt or not online:
        return []
    return [
        "rollout.n=1 with algorithm.advantage.per_prompt=true: each group holds one sample, whose advantage "
        "(its reward minus its group's mean) is always 0, so the run trains nothing; set rollout.n >= 2, or "
        "algorithm.advantage.per_prompt=false to normalise over the whole batch"
    ]


def _lora_rank_cautions(cfg: ExperimentConfig) -> list[str]:
    """A LoRA rank above the transformer's width: the update B·A of a width-w layer has rank at
    most w, so the extra rank adds parameters, memory and time and nothing else."""
    width = _transformer_width(cfg)
    rank = cfg.model.lora.rank
    if cfg.model.train_mode != "lora" or width is None or rank <= width:
        return []
    return [
        f"model.lora.rank={rank} is above the transformer's width {width}: an adapter of a {width}-wide layer "
        f"has rank at most {width}, so the rest only costs memory and time; use model.lora.rank <= {width}"
    ]


def _transformer_width(cfg: ExperimentConfig) -> int | None:
    """heads x head dim (diffusers; `dim` of a Lumina-style one) or hidden_size (transformers) from the transformer's
    config.json: in the model folder, or the architecture file shipped for a Hub id; None when
    neither describes it."""
    spec = spec_or_none(cfg.model.family, cfg.model.allow_import)
    folder = spec.weights_dir(cfg.model.path) if spec else Path(cfg.model.path).expanduser()
    local = folder / "transformer" / "config.json"
    if local.is_file():
        try:
            config = json.loads(local.read_text())
        except (OSError, ValueError):  # the loader reports an unreadable config; a caution stays quiet
            return None
    else:
        found = architecture_source(spec, cfg.model.path) if spec else None
        config = found[0].get("transformer", {}).get("config", {}) if found else {}
    if not isinstance(config, dict):
        return None
    if "attention_head_dim" in config and "num_attention_heads" in config:
        return int(config["attention_head_dim"]) * int(config["num_attention_heads"])
    if "dim" in config and "n_heads" in config:  # a Lumina-style single-stream DiT (Z-Image)
        return int(config["dim"])
    return int(config["hidden_size"]) if "hidden_size" in config else None


def _output_dir_cautions(output_dir: str) -> list[str]:
    """A run directory at the filesystem root or inside the installed genalign package."""
    folder = Path(output_dir).expanduser().resolve()
    package = Path(genalign.version.__file__).resolve().parent
    if folder == Path(folder.anchor):
        return [
            f"trainer.output_dir={output_dir} is the filesystem root: the run's checkpoints, logs and report "
            "would lie among the system's folders; give the run a folder of its own"
        ]
    if folder == package or package in folder.parents:
        return [
            f"trainer.output_dir={output_dir} is inside the installed genalign package ({package}): upgrading or "
            "reinstalling genalign deletes it; choose a folder outside the package"
        ]
    return []


def _gpu_cautions(cfg: ExperimentConfig) -> list[str]:
    """Ray GPU counts on a machine that shows no GPU: the plan runs every role on CPU."""
    if cfg.rollout.engine != "ray" or cfg.distributed.cross_node:
        return []
    resources = cfg.distributed.resources
    asked = {
        key: value
        for key, value in (
            ("distributed.resources.trainer.num_gpus", resources.trainer.num_gpus),
            ("distributed.resources.rollout.num_gpus", resources.rollout.num_gpus),
        )
        if value not in (0, 0.0)
    }
    if not asked:
        return []
    if placement_resources.environment_facts().visible_gpus:
        return []
    shown = ", ".join(
        f"{key}={value:g}" if isinstance(value, float) else f"{key}={value}" for key, value in asked.items()
    )
    return [
        f"{shown}, but no GPU is visible (CUDA_VISIBLE_DEVICES, the driver): the trainer and the Ray rollout "
        "workers run on CPU"
    ]


def _draws_text(cfg: ExperimentConfig) -> bool:
    """The family spec's `draws_text` (the toy model draws 32x32 coloured shapes, never text)."""
    return family_spec(cfg.model.family, cfg.model.allow_import).draws_text


def _manifest_size(path: str) -> int | None:
    try:
        return len(load_manifest(path))
    except ManifestError:  # reported by the file checks; a caution never replaces an error
        return None
