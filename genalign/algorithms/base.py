"""The `Algorithm` protocol: what the trainer asks of an RL objective.

Where it fits: step 5 of the loop. Nothing outside `algorithms/` asks which algorithm it
runs; the config checks, the step sizes, the trainer and the update loop read what the class
declares and call its hooks. Declarations (class attributes and classmethods of the config,
so they are known before any model loads):
  * `policy_kind` — "flow" (flow-matching trajectories) or "token" (image tokens): it must
    match the model family's;
  * `reference_kind(cfg)` — "none", "frozen" (the trainer builds the adapter-disabled initial
    policy for a KL term) or "own" (the algorithm keeps its own reference weights, DPO);
  * `data_source(cfg)` — "online" (rollout + rewards each step), "offline" (a preference
    dataset; no rollout) or "images" (an image–prompt dataset, flow-matching SFT; no rollout);
  * `needs_old_logprob` (the rollout's log-probs are trained on; the parity preflight runs
    only then), `needs_rollout_means`, `trainable_copies`;
  * `guided_log_probs(cfg)` — which log-prob of a sampled image token the rollout records:
    under CFG (True) or of the conditional stream alone;
  * `owned_options` — the `algorithm.*` keys only this algorithm reads (another algorithm
    refuses them when set), and `config_problems(cfg)`, its own config checks;
  * `stat_extremes` — which logged statistics also get their min / max columns;
  * `train_positions(cfg)` — positions trained per unit when the algorithm fixes their number
    itself (DGPO's σ count), else None: int(rollout.num_steps · timestep_fraction).
  * `final_sample_only` — the loss reads only each trajectory's final sample (AWM), so any
    rollout sampler serves it, the multistep `rollout.sampler=sa_solver` among them;
  * `needs_reward_gradients` — the loss back-propagates through the reward models (reward
    feedback): the config then admits only differentiable scorers in this process
    (`preflight/reward_contract.py`);
  * `backprop_forwards(cfg, num_steps)` — how many denoiser forwards one trained unit keeps
    for backward, and whether each is checkpointed (the memory plan counts their activations).
Hooks:
  * `training_batch` turns the step's trajectories and advantages into the units the update
    loop trains on (the trajectories themselves, or DPO's preference pairs);
  * `trained_units` — which of those units the round trains (Flow-GRPO's zero-advantage filter);
  * `train_step_indices` — the positions `compute_loss` is called at per micro-batch
    (denoising steps for Flow-GRPO, forward-process draws for NFT/DPO, the whole token
    sequence — one position — for AR-GRPO);
  * `replay_log_probs` — the stored trajectories' log-probs recomputed without grad, shaped
    like `batch.log_probs` (the parity preflight compares them);
  * `filler_unit` — one unit a rank with nothing to train replays with weight 0 (online DPO);
  * `rollout_weights` — the weights the rollout samples with (NFT: the old policy);
  * `after_update` — once per training step after the optimizer round (NFT's soft update);
  * `attach_rewards` — the run's reward runtime, once built (reward feedback scores its own
    samples with grad inside `compute_loss`);
  * `state_dict` / `load_state_dict` — algorithm state the checkpoint carries (NFT's old policy).
`AlgorithmBase` gives the defaults of an algorithm without extra state; `ShadowCopyBase` those
of a forward-process algorithm that keeps one float32 copy of the trained weights (NFT, AWM).
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from typing import TYPE_CHECKING, Any, Protocol, Self, TypeVar

import torch

from genalign.algorithms.advantages import nonzero_advantage_units
from genalign.algorithms.replay import replay_log_probs
from genalign.models.base import FlowPolicy, Policy
from genalign.rollout.batch import TrajectoryBatch
from genalign.rollout.token_batch import Trajectories
from genalign.weights.shadow import ShadowWeights, load_shadow_state, shadow_state

if TYPE_CHECKING:
    from genalign.algorithms.config import AlgorithmConfig
    from genalign.config.schema import ExperimentConfig

PolicyT = TypeVar("PolicyT", bound=Policy, contravariant=True)
"""The policy an algorithm trains: `FlowPolicy` for the flow algorithms, `TokenPolicy` for
AR-GRPO; generic code (the update loop, the parity preflight) holds `Algorithm[Policy]`-like
pairs of a policy and the algorithm that trains it."""


class TrainingUnits(Protocol):
    """What the update loop does with an algorithm's training units (the trajectories
    themselves, or DPO's preference pairs): count them, select some, move them, read their
    prompts."""

    prompts: list[str]

    def __len__(self) -> int: ...

    def index(self, idx: torch.Tensor | list[int]) -> Self: ...

    def to(self, device: torch.device | str) -> Self: ...


class Algorithm(Protocol[PolicyT]):
    title: str
    """The algorithm's name in messages ("GRPO-Guard")."""
    needs_reference: bool
    """True when compute_loss evaluates a reference policy (a KL term, DPO's reference)."""
    policy_kind: str
    """"flow" or "token": the trajectories it trains (the model family must sample them)."""
    needs_old_logprob: bool
    """True when compute_loss uses the rollout log-probs stored in the batch."""
    needs_rollout_means: bool
    """True when compute_loss reads the rollout kernel means (the rollout then records them)."""
    final_sample_only: bool
    """True when compute_loss reads only each trajectory's final sample x0 (not its steps,
    log-probs or means): rollout.sampler=sa_solver, which records nothing per step, is allowed."""
    needs_reward_gradients: bool
    """True when compute_loss back-propagates through the reward (`attach_rewards` hands it the
    runtime; the config admits only differentiable scorers in this process)."""

    stat_extremes: dict[str, tuple[str, ...]]
    """Statistic name -> the extremes ("min", "max") logged beside its mean as <name>_<extreme>."""
    trainable_copies: int
    """Float32 copies of the trained weights the algorithm keeps (the memory plan counts them)."""
    owned_options: tuple[str, ...]
    """`AlgorithmConfig` fields only this algorithm reads (refused under another algorithm)."""

    @classmethod
    def reference_kind(cls, cfg: AlgorithmConfig) -> str:
        """ "none", "frozen" (the trainer builds the frozen initial policy) or "own"."""
        ...

    @classmethod
    def data_source(cls, cfg: AlgorithmConfig) -> str:
        """ "online" (rollout and rewards each step), "offline" (data.preference_manifest) or
        "images" (data.image_manifest)."""
        ...

    @classmethod
    def guided_log_probs(cls, cfg: AlgorithmConfig) -> bool:
        """Token rollouts: record each token's log-prob under CFG, the distribution that
        sampled it (True), or of the conditional stream alone (False)."""
        ...

    @classmethod
    def config_problems(cls, cfg: ExperimentConfig) -> list[str]:
        """This algorithm's own checks of the whole config (one message per problem)."""
        ...

    @classmethod
    def train_positions(cls, cfg: AlgorithmConfig) -> int | None:
        """Positions trained per unit when the algorithm fixes the number itself; None: the
        stored steps int(rollout.num_steps · algorithm.timestep_fraction) (the step sizes)."""
        ...

    @classmethod
    def backprop_forwards(cls, cfg: AlgorithmConfig, num_steps: int) -> tuple[int, bool]:
        """(denoiser forwards whose activations one backward holds at most, whether each is
        gradient-checkpointed) for a `num_steps`-step rollout: the memory plan's replay line."""
        ...

    def attach_rewards(self, rewards: Any) -> None:
        """The run's reward runtime (`rewards/composite.py`), handed over once it is built."""
        ...

    def training_batch(self, batch: Trajectories, advantages: torch.Tensor) -> tuple[TrainingUnits, torch.Tensor]:
        """(units, unit advantages [U]) the update trains on."""
        ...

    def trained_units(
        self, advantages: torch.Tensor, micro_batch_size: int, generator: torch.Generator
    ) -> tuple[torch.Tensor, int]:
        """Positions [K] of this rank's units the round trains, and the micro-batch size to
        train them with."""
        ...

    def prepare_update(
        self, policy: PolicyT, batch: TrainingUnits, step_indices: list[int], micro_batch_size: int
    ) -> TrainingUnits:
        """Called once per optimizer round before any update (e.g. to record the current
        policy's log-probs for rollout correction); returns the batch to train on."""
        ...

    def train_step_indices(self, batch: TrainingUnits) -> list[int]:
        """Positions of this batch that are trained, in training order."""
        ...

    def replay_log_probs(
        self, policy: PolicyT, batch: Trajectories, step_indices: list[int], chunk_size: int
    ) -> torch.Tensor:
        """`batch.log_probs` recomputed under `policy` at `step_indices` (no grad, CPU)."""
        ...

    def compute_loss(
        self, policy: PolicyT, batch: TrainingUnits, advantages: torch.Tensor, step_index: int
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Loss (scalar, with grad) of micro-batch `batch` at position `step_index`, and
        detached per-unit statistics ([b] tensors) for logging."""
        ...

    def filler_unit(self, batch: Trajectories) -> TrainingUnits:
        """One training unit built from the step's trajectories, replayed with weight 0 by a
        rank whose `training_batch` is empty, so that it still enters every collective."""
        ...

    def rollout_weights(self) -> AbstractContextManager[None]:
        """Within the block the trained module holds the weights the rollout samples with."""
        ...

    def after_update(self, optimizer_steps: int) -> dict[str, float]:
        """Called once per training step after its `optimizer_steps` optimizer steps; metrics."""
        ...

    def state_dict(self) -> dict[str, torch.Tensor]:
        """Tensors to checkpoint (empty: nothing beyond the trained weights)."""
        ...

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None: ...


def velocity_kl_problems(cfg: ExperimentConfig) -> list[str]:
    """A forward-process algorithm (no SDE mean to compare) takes its KL on the velocity."""
    algorithm = cfg.algorithm
    if algorithm.kl_beta > 0 and algorithm.kl_type != "velocity":
        return [
            f"algorithm.name={algorithm.name} has no SDE mean to compare: with algorithm.kl_beta > 0 set "
            "algorithm.kl_type=velocity (its KL is mean (v - v_ref)^2)"
        ]
    return []


class AlgorithmBase:
    """Defaults: a flow-matching algorithm trained online on the trajectories, with a frozen
    reference only for a KL term, sampling with the live weights, no extra state."""

    title = "this algorithm"
    """The algorithm's name in messages ("GRPO-Guard")."""
    policy_kind = "flow"
    needs_rollout_means = False
    final_sample_only = False
    needs_reward_gradients = False
    trainable_copies = 0
    """Float32 copies of the trained weights the algorithm keeps (NFT: its old policy); the
    memory plan counts them."""
    owned_options: tuple[str, ...] = ()
    """`AlgorithmConfig` fields only this algorithm reads ("nft" names the whole block); set
    to a non-default value under another algorithm they are a config error."""
    stat_extremes: dict[str, tuple[str, ...]] = {}

    @classmethod
    def reference_kind(cls, cfg: AlgorithmConfig) -> str:
        """A KL term (algorithm.kl_beta > 0) compares with the frozen initial policy."""
        return "frozen" if cfg.kl_beta > 0 else "none"

    @classmethod
    def data_source(cls, cfg: AlgorithmConfig) -> str:
        return "online"

    @classmethod
    def backprop_forwards(cls, cfg: AlgorithmConfig, num_steps: int) -> tuple[int, bool]:
        """One replayed forward per backward, checkpointed as model.gradient_checkpointing says."""
        return 1, False

    @classmethod
    def guided_log_probs(cls, cfg: AlgorithmConfig) -> bool:
        """The log-prob of the distribution that sampled (a flow algorithm samples no tokens)."""
        return True

    @classmethod
    def train_positions(cls, cfg: AlgorithmConfig) -> int | None:
        return None

    @classmethod
    def config_problems(cls, cfg: ExperimentConfig) -> list[str]:
        """Only an offline algorithm reads a preference dataset, only an image-data one an image dataset."""
        problems = []
        if cfg.data.preference_manifest is not None and cls.data_source(cfg.algorithm) != "offline":
            problems.append(
                f"data.preference_manifest is set but only algorithm.name=dpo with algorithm.dpo.source="
                f"offline reads it (algorithm.name={cfg.algorithm.name!r}); remove it or select offline DPO"
            )
        if cfg.data.image_manifest is not None and cls.data_source(cfg.algorithm) != "images":
            problems.append(
                f"data.image_manifest is set but only algorithm.name=sft with algorithm.sft.source=dataset "
                f"reads it (algorithm.name={cfg.algorithm.name!r}); remove it or select dataset SFT"
            )
        return problems

    cfg: AlgorithmConfig
    """Set by each algorithm's constructor."""
    needs_reference: bool
    reference: Policy | None

    def _take_reference(self, cfg: AlgorithmConfig, reference: Policy | None) -> None:
        """Keep the frozen reference the trainer built when `reference_kind` asks for one."""
        self.needs_reference = self.reference_kind(cfg) == "frozen"
        if self.needs_reference and reference is None:
            raise ValueError("algorithm.kl_beta > 0 needs a reference policy")
        self.reference = reference

    def trained_units(
        self, advantages: torch.Tensor, micro_batch_size: int, generator: torch.Generator
    ) -> tuple[torch.Tensor, int]:
        """Every unit, or with algorithm.drop_zero_advantage Flow-GRPO's filter: the units
        whose advantage is exactly 0 carry no policy gradient and are dropped, as many
        micro-batches kept (`advantages.nonzero_advantage_units`)."""
        if self.cfg.drop_zero_advantage:
            return nonzero_advantage_units(advantages, micro_batch_size, generator)
        return torch.arange(len(advantages)), micro_batch_size

    def prepare_update(
        self, policy: Policy, batch: TrainingUnits, step_indices: list[int], micro_batch_size: int
    ) -> TrainingUnits:
        return batch

    def training_batch(self, batch: Trajectories, advantages: torch.Tensor) -> tuple[TrainingUnits, torch.Tensor]:
        return batch, advantages

    def filler_unit(self, batch: Trajectories) -> TrainingUnits:
        return batch.index(torch.tensor([0]))

    def replay_log_probs(
        self, policy: FlowPolicy, batch: TrajectoryBatch, step_indices: list[int], chunk_size: int
    ) -> torch.Tensor:
        """Stored SDE steps re-scored with the rollout's kernel (`algorithms.replay`); a token
        algorithm overrides it."""
        return replay_log_probs(policy, batch, step_indices, chunk_size)

    def rollout_weights(self) -> AbstractContextManager[None]:
        return nullcontext()

    def attach_rewards(self, rewards: Any) -> None:
        """Nothing: the loss reads the rollout's rewards through the advantages."""

    def after_update(self, optimizer_steps: int) -> dict[str, float]:
        return {}

    def state_dict(self) -> dict[str, torch.Tensor]:
        return {}

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        if state:
            raise ValueError(f"{type(self).__name__} keeps no algorithm state, got {sorted(state)[:5]}")


class ClippedRatioBase(AlgorithmBase):
    """What the clipped-ratio algorithms (Flow-GRPO and its variants, AR-GRPO) share: they train
    on the rollout's stored log-probs (so the parity preflight runs), allow several optimizer
    steps per rollout, and evaluate the reference only when algorithm.kl_beta > 0. `parameters`
    (the trained tensors) is part of the common constructor; these algorithms keep no copy."""

    needs_old_logprob = True
    needs_rollout_means = False
    """True when the loss reads the rollout kernel means (`TrajectoryBatch.means`: GRPO-Guard)."""
    stat_extremes = {"ratio": ("min", "max"), "log_prob_drift": ("max",)}

    def __init__(
        self,
        cfg: AlgorithmConfig,
        reference: Policy | None = None,
        parameters: dict[str, torch.nn.Parameter] | None = None,
    ):
        self.cfg = cfg
        self._take_reference(cfg, reference)


class ShadowCopyBase(AlgorithmBase):
    """What the forward-process algorithms that keep one float32 copy of the trained weights
    share (DiffusionNFT's old policy, AWM's anchor): they train on clean samples, not on the
    rollout's log-probs; `parameters` (the trained tensors) is required, the copy starts equal to
    them; the copy and the optimizer-step count are the algorithm's checkpointed state
    (`weights/shadow.py`); a KL to the reference is on the velocity (there is no SDE mean)."""

    needs_old_logprob = False
    trainable_copies = 1
    copy_name = "copy"
    """What the copy is, in messages ("old (sampling) policy", "anchor")."""
    copy_prefix = "copy/"
    """Its keys' prefix in `checkpoint-*/algorithm.safetensors`."""

    @classmethod
    def config_problems(cls, cfg: ExperimentConfig) -> list[str]:
        return super().config_problems(cfg) + velocity_kl_problems(cfg)

    def __init__(
        self,
        cfg: AlgorithmConfig,
        reference: Policy | None = None,
        parameters: dict[str, torch.nn.Parameter] | None = None,
    ):
        if not parameters:
            raise ValueError(f"{self.title} needs the trained parameters to keep its {self.copy_name}")
        self.cfg = cfg
        self._take_reference(cfg, reference)
        self.copy = ShadowWeights(parameters)  # θ at the start, as the reference codes copy their adapter
        self.optimizer_steps = 0

    def state_dict(self) -> dict[str, torch.Tensor]:
        return shadow_state(self.copy, self.copy_prefix, self.optimizer_steps)

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        self.optimizer_steps = load_shadow_state(
            self.copy, self.copy_prefix, state, f"{self.title} {self.copy_name}", self.cfg.name
        )
