"""Cross-block checks of the algorithm choice, before any model loads.

Where it fits: `validate` calls `algorithm_problems` beside its other checks. Nothing here
knows an algorithm by name: the algorithm class `algorithm.name` selects (a registered name,
or your own "package.module:Class" listed in algorithm.allow_import) declares what it trains
and which options it owns, and `config_problems` holds its own checks
(`algorithms/base.py`). What stays here is the generic part:
* the name resolves (a dotted path imports and is a class);
* the family's trajectories match what the algorithm trains (`policy_kind` against the
  family's kind), and the token-only / flow-only rollout keys match the family;
* an option another algorithm owns (`owned_options`) is left at its default.
"""

from __future__ import annotations

import dataclasses

from genalign.algorithms.registry import ALGORITHMS, algorithm_class, registered_algorithms
from genalign.config.registry import import_problem, is_dotted_path
from genalign.config.schema import ExperimentConfig
from genalign.preflight.values import family_kind, token_family_names

FAMILY_SAMPLES = {"token": "generates image tokens", "flow": "is a flow-matching family"}
ALGORITHM_TRAINS = {"token": "trains image tokens", "flow": "trains flow-matching trajectories"}


def family_problems(cfg: ExperimentConfig) -> list[str]:
    """The rollout keys only one kind of family reads."""
    family, rollout = cfg.model.family, cfg.rollout
    problems: list[str] = []
    token_family = family_kind(cfg) == "token"
    if token_family:
        flow_only = {
            "rollout.same_initial_noise": rollout.same_initial_noise,
            "rollout.sde_window.size": rollout.sde_window.size,
            "rollout.ode_final_step": rollout.ode_final_step,
            "rollout.sampler": rollout.sampler if rollout.sampler != "kernel" else None,
        }
        for key, value in flow_only.items():
            if value:
                problems.append(
                    f"{key}={value} shapes an SDE rollout; model.family={family} samples image tokens "
                    "(seeded per sample) and has none: remove it"
                )
    if 0 < rollout.temperature != 1.0 and not token_family:  # <= 0: RolloutConfig.problems reports it
        problems.append(
            f"rollout.temperature={rollout.temperature} is read by token families only "
            f"({', '.join(token_family_names())}); model.family={family} samples with an SDE: remove it"
        )
    return problems


def kind_problems(cfg: ExperimentConfig, algorithm: type, others: dict[str, type]) -> list[str]:
    """The family samples what the algorithm trains; else name the algorithms that fit."""
    family_sampler = family_kind(cfg)
    if family_sampler is None or algorithm.policy_kind == family_sampler:
        return []
    fitting = [name for name, cls in others.items() if cls.policy_kind == family_sampler]
    return [
        f"model.family={cfg.model.family} {FAMILY_SAMPLES[family_sampler]}; algorithm.name="
        f"{cfg.algorithm.name!r} {ALGORITHM_TRAINS[algorithm.policy_kind]}. Use one of: {', '.join(fitting)}"
    ]


def foreign_option_problems(cfg: ExperimentConfig, algorithm: type, others: dict[str, type]) -> list[str]:
    """An `algorithm.*` option only other algorithms read, set away from its default."""
    defaults = type(cfg.algorithm)()
    owners: dict[str, tuple[str, type]] = {}
    for name, cls in others.items():
        for key in cls.owned_options:
            if key not in algorithm.owned_options:
                owners.setdefault(key, (name, cls))
    problems = []
    for key, (owner, cls) in owners.items():
        for dotted, value, default in _leaves(key, getattr(cfg.algorithm, key), getattr(defaults, key)):
            if value != default:
                shown = str(value).lower() if isinstance(value, bool) else value
                article = "an" if cls.title[:1] in "AEIOU" else "a"
                problems.append(
                    f"algorithm.{dotted}={shown} is {article} {cls.title} option, but algorithm.name="
                    f"{cfg.algorithm.name!r}; remove it or set algorithm.name={owner}"
                )
    return problems


def _leaves(key: str, value, default):
    """(dotted key, value, default) of a field, one per leaf of a nested options block."""
    if dataclasses.is_dataclass(value):
        for field in dataclasses.fields(value):
            yield from _leaves(f"{key}.{field.name}", getattr(value, field.name), getattr(default, field.name))
    else:
        yield key, value, default


def algorithm_problems(cfg: ExperimentConfig) -> list[str]:
    """Every problem of the algorithm choice: the name, the kind, foreign options, then the
    algorithm's own `config_problems`."""
    problems = family_problems(cfg)
    name = cfg.algorithm.name
    message = ALGORITHMS.check(name, cfg.algorithm.allow_import)
    if message is None and is_dotted_path(name) and name not in ALGORITHMS:
        message = import_problem("algorithm.name", name)
    if message:
        return problems + [message]
    algorithm = algorithm_class(cfg)
    others = {other: cls for other, cls in registered_algorithms().items() if cls is not algorithm}
    return (
        problems
        + kind_problems(cfg, algorithm, {name: algorithm, **others})
        + foreign_option_problems(cfg, algorithm, others)
        + algorithm.config_problems(cfg)
        + overlap_problems(cfg, algorithm)
        + sampler_problems(cfg, algorithm)
    )


def sampler_problems(cfg: ExperimentConfig, algorithm: type) -> list[str]:
    """rollout.sampler=sa_solver records no per-step log-prob or mean (a multistep step has no
    one-step density): only an algorithm that trains on the final sample alone can use it."""
    if cfg.rollout.sampler == "kernel" or algorithm.final_sample_only:
        return []
    return [
        f"rollout.sampler={cfg.rollout.sampler} records only the trajectory's latents, but algorithm.name="
        f"{cfg.algorithm.name!r} trains on more of the rollout (its steps, log-probs or means): set "
        "rollout.sampler=kernel"
    ]


def overlap_problems(cfg: ExperimentConfig, algorithm: type) -> list[str]:
    """rollout.overlap=one_step trains on samples one update old: the algorithm must train on
    a rollout, and one trained on the rollout's log-probs needs them corrected. The PPO ratio
    taken against a sampler one update old starts away from 1, and at Flow-GRPO's clip range
    (1e-4 for SD3.5) nearly every sample would be clipped."""
    if cfg.rollout.overlap == "off":
        return []
    if algorithm.data_source(cfg.algorithm) != "online":
        return [f"rollout.overlap=one_step: algorithm.name={cfg.algorithm.name} trains on no rollout"]
    if algorithm.needs_old_logprob and cfg.algorithm.rollout_correction.mode == "off":
        return [
            "rollout.overlap=one_step trains on samples one update old: set algorithm.rollout_correction.mode="
            "truncate (TIS) or mask, which take the PPO ratio against the current weights and weight each "
            "sample by how likely they make it (docs/algorithms.md §2.11)"
        ]
    return []
