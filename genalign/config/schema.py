"""The experiment config: one typed tree composed of the component configs.

Where it fits: `config.loader` composes YAML layers + dotlist overrides into a dict and
validates it against `ExperimentConfig`; everything downstream receives typed dataclasses.
Each block's dataclass lives next to the code that uses it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from genalign.algorithms.config import AlgorithmConfig
from genalign.data.config import DataConfig
from genalign.evaluation.config import EvalConfig
from genalign.models.config import ModelConfig
from genalign.placement.config import DistributedConfig
from genalign.rewards.config import RewardConfig
from genalign.rollout.config import RolloutConfig
from genalign.training.config import ActorConfig, TrainerConfig


@dataclass
class ExperimentConfig:
    recipe: str | None = None
    """The recipe this config was composed from (`--config`; set by the loader, whatever a
    layer says). Provenance only: shown by `genalign config`, in model cards and tracker runs."""
    model: ModelConfig = field(default_factory=ModelConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    actor: ActorConfig = field(default_factory=ActorConfig)
    algorithm: AlgorithmConfig = field(default_factory=AlgorithmConfig)
    reward: RewardConfig = field(default_factory=RewardConfig)
    data: DataConfig = field(default_factory=DataConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    distributed: DistributedConfig = field(default_factory=DistributedConfig)
