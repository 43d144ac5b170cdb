"""Settings that are valid and run, but that a user would want to hear about first.

Where it fits: after `load_config` has accepted a config. `genalign config` prints each line
as `genalign: warning: ...`; the trainer logs each as a warning before it builds anything (so
it is in train.log). Nothing here refuses a run: a negated reward is a real experiment (the
negated controls of the learning tests), a one-prompt manifest a real debugging run.
"""

from __future__ import annotations

from genalign.config.schema import ExperimentConfig

TEXT_REWARDS = ("ocr",)
"""Rewards that read text drawn in the image."""


def config_cautions(cfg: ExperimentConfig) -> list[str]:
    """One line per valid-but-surprising setting, naming the key."""
    cautions = []
    for key, weights in (("reward.components", cfg.reward.components), ("eval.gold_rewards", cfg.eval.gold_rewards)):
        for name, weight in weights.items():
            if weight < 0:
                cautions.append(f"{key}.{name}={weight:g} is negative: the run learns to lower {name}'s score "
                                "(as a negated control does); use a positive weight to raise it")
    for name in TEXT_REWARDS:
        if cfg.reward.components.get(name) and not _draws_text(cfg):
            cautions.append(f"reward.components.{name} with model.family={cfg.model.family}: this model never draws "
                            f"text, so {name} scores every image about the same and the run learns nothing from it")
    prompts = _manifest_size(cfg.data.manifest) if cfg.data.preference_manifest is None else None
    if prompts is not None and prompts < cfg.rollout.rollout_batch_size:
        cautions.append(f"data.manifest holds {prompts} prompt(s) but rollout.rollout_batch_size="
                        f"{cfg.rollout.rollout_batch_size} prompts are drawn per step: the same prompts repeat "
                        "within every step as separate groups")
    cautions += _gpu_cautions(cfg)
    return cautions


def _gpu_cautions(cfg: ExperimentConfig) -> list[str]:
    """Ray GPU counts on a machine that shows no GPU: the plan runs every role on CPU."""
    if cfg.rollout.engine != "ray" or cfg.distributed.cross_node:
        return []
    resources = cfg.distributed.resources
    asked = {key: value for key, value in (("distributed.resources.trainer.num_gpus", resources.trainer.num_gpus),
                                           ("distributed.resources.rollout.num_gpus", resources.rollout.num_gpus))
             if value not in (0, 0.0)}
    if not asked:
        return []
    from genalign.training.resources import environment_facts

    if environment_facts().visible_gpus:
        return []
    shown = ", ".join(f"{key}={value:g}" if isinstance(value, float) else f"{key}={value}"
                      for key, value in asked.items())
    return [f"{shown}, but no GPU is visible (CUDA_VISIBLE_DEVICES, the driver): the trainer and the Ray rollout "
            "workers run on CPU"]


def _draws_text(cfg: ExperimentConfig) -> bool:
    """The family spec's `draws_text` (the toy model draws 32x32 coloured shapes, never text)."""
    from genalign.models.spec import family_spec

    return family_spec(cfg.model.family, cfg.model.allow_import).draws_text


def _manifest_size(path: str) -> int | None:
    from genalign.data.prompts import ManifestError, load_manifest

    try:
        return len(load_manifest(path))
    except ManifestError:  # reported by the file checks; a caution never replaces an error
        return None
