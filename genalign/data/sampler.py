"""The step prompt sampler: P prompts × n samples (a *group* per prompt) with per-sample seeds.

Where it fits: step 1 of the loop. `PromptSampler.sample(step)` is a pure function of
(seed, step) — no cursor, no RNG state — so a resumed run draws exactly the prompts and
seeds the uninterrupted run would have drawn, and every Ray worker / torchrun rank can
compute (or slice) the same batch without communication.

Prompt order: position k of the run (k = step·P + j) reads entry k mod N of the permutation
of epoch k // N (N manifest rows): no prompt repeats within an epoch and epochs follow each
other seamlessly, even when P does not divide N. Permutations are seeded by (seed, epoch).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import torch

from genalign.data.prompts import PromptExample

SEED_LIMIT = 2**63
"""Seeds lie in [0, 2**63): they fit a torch int64 and `torch.Generator.manual_seed`."""


@dataclass
class PromptGroupBatch:
    """One step's prompts, group-contiguous: sample i belongs to group `group_ids[i]`."""

    prompts: list[str]  # [B] each drawn prompt repeated samples_per_prompt times
    prompt_ids: torch.Tensor  # [B] int64 manifest row (the group's prompt)
    group_ids: torch.Tensor  # [B] int64 group within the step: 0..P-1, each repeated n times
    seeds: torch.Tensor  # [B] int64 per-sample seed, distinct within a group: drives the SDE noise
    metadata: list[dict]  # [B] the prompt row's extra manifest fields
    init_seeds: torch.Tensor | None = None
    """[B] int64 seed of the initial noise x_T; None = `seeds`. Shared within a group when
    rollout.same_initial_noise (DanceGRPO), while the SDE noise stays per sample."""

    def __post_init__(self) -> None:
        if self.init_seeds is None:
            self.init_seeds = self.seeds.clone()
        size = len(self.prompts)
        shapes = {
            "prompt_ids": tuple(self.prompt_ids.shape),
            "group_ids": tuple(self.group_ids.shape),
            "seeds": tuple(self.seeds.shape),
            "init_seeds": tuple(self.init_seeds.shape),
            "metadata": (len(self.metadata),),
        }
        wrong = {name: shape for name, shape in shapes.items() if shape != (size,)}
        if wrong:
            raise ValueError(f"PromptGroupBatch of {size} prompts has mismatched fields {wrong}")

    def __len__(self) -> int:
        return len(self.prompts)

    def index(self, positions: list[int]) -> "PromptGroupBatch":
        """The samples at `positions` (in that order), e.g. one rollout worker's shard."""
        rows = torch.as_tensor(positions, dtype=torch.long)  # [b]
        return PromptGroupBatch(
            [self.prompts[i] for i in positions],
            self.prompt_ids[rows],
            self.group_ids[rows],
            self.seeds[rows],
            [self.metadata[i] for i in positions],
            self.init_seeds[rows],
        )


def _mix(*parts: object) -> int:
    """A well-mixed integer in [0, 2**63) from the parts (blake2b: stable across platforms,
    Python versions and hash randomisation, unlike `hash`)."""
    digest = hashlib.blake2b(":".join(map(str, parts)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") % SEED_LIMIT


def sample_seed(base_seed: int, step: int, index: int) -> int:
    """The seed of sample `index` of `step` under run seed `base_seed`, in [0, 2**63).

    Hashing (rather than e.g. `base_seed + step * B + index`) keeps seeds distinct across
    steps whatever the batch size, and unrelated for neighbouring run seeds."""
    return _mix("sample", base_seed, step, index)


def epoch_permutation(base_seed: int, epoch: int, size: int) -> list[int]:
    """The order in which epoch `epoch` visits manifest rows 0..size-1."""
    generator = torch.Generator().manual_seed(_mix("epoch", base_seed, epoch))
    return torch.randperm(size, generator=generator).tolist()


class PromptSampler:
    """Draws `prompts_per_step` prompts per step, each repeated `samples_per_prompt` times.

    Every sample has its own `seeds` entry (its SDE noise). `same_initial_noise=True`
    (rollout.same_initial_noise, DanceGRPO-style shared x_T) gives every member of a group the
    `init_seeds` entry of its first member, so the group starts from one x_T and still
    diverges through the SDE noise.
    """

    def __init__(
        self,
        examples: list[PromptExample],
        prompts_per_step: int,
        samples_per_prompt: int,
        seed: int,
        shuffle: bool = True,
        same_initial_noise: bool = False,
    ):
        if not examples:
            raise ValueError("PromptSampler needs at least one prompt; data.manifest is empty")
        if prompts_per_step < 1:
            raise ValueError(f"prompts_per_step must be >= 1, got {prompts_per_step} (rollout.rollout_batch_size)")
        if samples_per_prompt < 1:
            raise ValueError(f"samples_per_prompt must be >= 1, got {samples_per_prompt} (rollout.n)")
        self.examples = list(examples)
        self.prompts_per_step = prompts_per_step
        self.samples_per_prompt = samples_per_prompt
        self.seed = seed
        self.shuffle = shuffle
        self.same_initial_noise = same_initial_noise
        self._orders: dict[int, list[int]] = {}  # cache of the last epochs' permutations (pure, so safe)

    def _epoch_order(self, epoch: int) -> list[int]:
        if not self.shuffle:
            return list(range(len(self.examples)))
        if epoch not in self._orders:
            if len(self._orders) >= 2:  # a step spans at most a few epochs; keep memory bounded
                self._orders.pop(min(self._orders))
            self._orders[epoch] = epoch_permutation(self.seed, epoch, len(self.examples))
        return self._orders[epoch]

    def rows(self, step: int) -> list[int]:
        """Manifest rows drawn at `step`: positions [step·P, (step+1)·P) of the epochs' orders."""
        if step < 0:
            raise ValueError(f"step must be >= 0, got {step}")
        size = len(self.examples)
        start = step * self.prompts_per_step
        rows = []
        for position in range(start, start + self.prompts_per_step):
            epoch, offset = divmod(position, size)
            rows.append(self._epoch_order(epoch)[offset])
        return rows

    def sample(self, step: int) -> PromptGroupBatch:
        """The step's batch of B = P·n samples, group-contiguous; pure in (seed, step)."""
        n = self.samples_per_prompt
        chosen = [self.examples[row] for row in self.rows(step)]  # [P]
        count = len(chosen) * n
        seeds = [sample_seed(self.seed, step, i) for i in range(count)]  # [B]
        init_seeds = [seeds[(i // n) * n] for i in range(count)] if self.same_initial_noise else seeds  # [B]
        return PromptGroupBatch(
            prompts=[example.prompt for example in chosen for _ in range(n)],
            prompt_ids=torch.tensor([example.prompt_id for example in chosen for _ in range(n)], dtype=torch.long),
            group_ids=torch.arange(len(chosen), dtype=torch.long).repeat_interleave(n),  # [B]
            seeds=torch.tensor(seeds, dtype=torch.long),
            metadata=[dict(example.metadata) for example in chosen for _ in range(n)],
            init_seeds=torch.tensor(init_seeds, dtype=torch.long),
        )
