"""Every selected scorer against the reward contract and the media the run makes.

Where it fits: `validate` runs `registered_reward_problems` (the shipped scorers: their
classes import no model, so reading `min_frames` costs nothing), and `file_problems` runs
`user_reward_problems` after `import_problems` has imported the scorers the user allowed by
path (`reward.allow_import`): a class without `score`, a constructor without `device=`, or a
reward that cannot score the configured frames (`temporal_consistency` on single images) is
then a config error before any model loads, not a traceback in the first step. An algorithm
that back-propagates through the reward (`needs_reward_gradients`: reward feedback) gets only
scorers that declare `differentiable`, scored in this process, summed, on a family whose decode
is differentiable (`gradient_problems`). The contract itself is `rewards/base.py`.
"""

from __future__ import annotations

from genalign.algorithms.registry import algorithm_class
from genalign.config.registry import RegistryError, is_dotted_path
from genalign.config.schema import ExperimentConfig
from genalign.models.spec import family_spec
from genalign.rewards.base import contract_problems, is_differentiable, min_frames, wants_source
from genalign.rewards.registry import REWARDS


def selected_scorers(cfg: ExperimentConfig) -> list[tuple[str, str]]:
    """(config key, scorer name) of every scorer the run builds: reward.components and
    eval.gold_rewards with a non-zero weight, and eval.quality_metrics."""
    return (
        [("reward.components", name) for name, weight in cfg.reward.components.items() if weight]
        + [("eval.gold_rewards", name) for name, weight in cfg.eval.gold_rewards.items() if weight]
        + [("eval.quality_metrics", name) for name in cfg.eval.quality_metrics]
    )


def frames_problem(key: str, name: str, scorer_cls: type, num_frames: int) -> str | None:
    """Why `scorer_cls` cannot score samples of `num_frames` frames, or None."""
    needed = min_frames(scorer_cls)
    if num_frames < 1 or num_frames >= needed:  # below 1 is model.num_frames' own problem (preflight/values.py)
        return None
    made = "single images" if num_frames == 1 else f"{num_frames} frames per sample"
    return (
        f"{key}.{name} needs at least {needed} frames per sample, but model.num_frames={num_frames} makes {made}: "
        "set model.num_frames to a video length the family takes (wan, cosmos: 4k + 1, e.g. 33), or remove "
        f"{name}"
    )


def needs_reward_gradients(cfg: ExperimentConfig) -> bool:
    """Whether the selected algorithm back-propagates through the reward (an unknown name is
    `algorithm_checks`' to report)."""
    try:
        return bool(getattr(algorithm_class(cfg), "needs_reward_gradients", False))
    except Exception:  # an unknown name, or a user's module that fails to import: algorithm_checks reports it
        return False


def gradient_problem(name: str, scorer_cls: type, algorithm: str) -> str | None:
    """Why reward.components.`name` cannot give `algorithm` image gradients, or None."""
    if is_differentiable(scorer_cls):
        return None
    shipped = sorted(n for n in REWARDS.names() if is_differentiable(REWARDS.resolve(n)))
    return (
        f"reward.components.{name}: algorithm.name={algorithm} back-propagates through the reward, but "
        f"{scorer_cls.__name__} gives no image gradients (it does not declare differentiable=True with "
        f"score_pixels); use differentiable scorers only ({', '.join(shipped)}) or a policy-gradient algorithm"
    )


def gradient_setup_problems(cfg: ExperimentConfig) -> list[str]:
    """What an algorithm that back-propagates through the reward needs beside its scorers: the
    scorers in this process (a Ray or HTTP runtime returns numbers, not a graph), their scores
    summed, and a family whose decode carries the gradient."""
    if not needs_reward_gradients(cfg):
        return []
    algorithm, problems = cfg.algorithm.name, []
    if cfg.reward.runtime != "local":
        problems.append(
            f"reward.runtime={cfg.reward.runtime}: algorithm.name={algorithm} back-propagates through the reward "
            "models, which must run in the trainer's process: set reward.runtime=local"
        )
    if cfg.reward.aggregation != "weighted_sum":
        problems.append(
            f"reward.aggregation={cfg.reward.aggregation}: algorithm.name={algorithm} maximises the weighted sum of "
            "the differentiable scores; set reward.aggregation=weighted_sum"
        )
    try:
        spec = family_spec(cfg.model.family, cfg.model.allow_import)
    except RegistryError:
        return problems  # the family's own check names it
    if not spec.differentiable_decode:
        problems.append(
            f"model.family={cfg.model.family} has no differentiable decode (FamilySpec.differentiable_decode): "
            f"algorithm.name={algorithm} back-propagates the reward through it"
        )
    return problems


def registered_reward_problems(cfg: ExperimentConfig) -> list[str]:
    """Shipped scorers that cannot score what this run generates, or give no gradient to an
    algorithm that needs one (a name that is not registered is `validate`'s to report)."""
    problems = gradient_setup_problems(cfg)
    gradients = needs_reward_gradients(cfg)
    for key, name in selected_scorers(cfg):
        if name not in REWARDS:
            continue
        scorer_cls = REWARDS.resolve(name)
        problem = frames_problem(key, name, scorer_cls, cfg.model.num_frames)
        if problem:
            problems.append(problem)
        problem = (
            gradient_problem(name, scorer_cls, cfg.algorithm.name) if gradients and key == "reward.components" else None
        )
        if problem:
            problems.append(problem)
    return problems


def user_reward_problems(cfg: ExperimentConfig) -> list[str]:
    """The allowed dotted-path scorers (already importable: `import_problems` ran) against the
    contract and the run's frames."""
    problems = []
    for key, name in selected_scorers(cfg):
        if not (is_dotted_path(name) and name in cfg.reward.allow_import):
            continue
        scorer_cls = REWARDS.resolve(name, cfg.reward.allow_import)
        broken = contract_problems(scorer_cls, f"{key}.{name}")
        problems += broken
        problem = None if broken else frames_problem(key, name, scorer_cls, cfg.model.num_frames)
        if problem:
            problems.append(problem)
        if not broken and key == "reward.components" and needs_reward_gradients(cfg):
            problem = gradient_problem(name, scorer_cls, cfg.algorithm.name)
            if problem:
                problems.append(problem)
    return problems


def source_problems(cfg: ExperimentConfig, carries_sources: dict[str, bool]) -> list[str]:
    """Scorers that compare a result with its source image (`needs_source`) selected for a
    manifest whose prompts carry none: `carries_sources` maps "manifest" / "eval_manifest" to
    whether its rows name source images. The training reward scores both manifests, gold rewards
    and quality metrics the evaluation's. A name that does not resolve is reported elsewhere."""
    problems = []
    for key, name in selected_scorers(cfg):
        registered = name in REWARDS
        if not registered and not (is_dotted_path(name) and name in cfg.reward.allow_import):
            continue
        try:
            scorer_cls = REWARDS.resolve(name, cfg.reward.allow_import)
        except Exception:  # a user's module that does not import (whatever it raises): import_problems reports it
            continue
        if not wants_source(scorer_cls):
            continue
        scored = ("manifest", "eval_manifest") if key == "reward.components" else ("eval_manifest",)
        for manifest in scored:
            if carries_sources.get(manifest) is False:
                problems.append(
                    f"{key}.{name} compares each result with its source image, but data.{manifest} names "
                    'none: give its rows a "source_image" (an editing prompt set such as datasets/edit/train.jsonl)'
                )
    return problems
