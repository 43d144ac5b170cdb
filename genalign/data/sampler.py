"""The step prompt sampler: prompts × n groups with per-sample seeds.

Where it fits: step 1 of the loop. `sample(step)` is a pure function of (seed, step), so
a resumed run draws exactly the prompts and seeds the uninterrupted run would have, and a
sharded run (Ray workers, torchrun ranks) can slice the same batch.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import torch

from genalign.data.prompts import PromptExample


@dataclass
class PromptGroupBatch:
    prompts: list[str]  # [B], each prompt repeated samples_per_prompt times, group-contiguous
    prompt_ids: torch.Tensor  # [B] int64 manifest row
    group_ids: torch.Tensor  # [B] int64 group within the step
    seeds: torch.Tensor  # [B] int64 per-sample noise seed
    metadata: list[dict]

    def __len__(self) -> int:
        return len(self.prompts)

    def index(self, positions: list[int]) -> "PromptGroupBatch":
        tensor = torch.as_tensor(positions, dtype=torch.long)
        return PromptGroupBatch([self.prompts[i] for i in positions], self.prompt_ids[tensor],
                                self.group_ids[tensor], self.seeds[tensor], [self.metadata[i] for i in positions])


def sample_seed(base_seed: int, step: int, index: int) -> int:
    """A well-mixed seed in [0, 2**63) for sample `index` of `step` (blake2b of the triple)."""
    digest = hashlib.blake2b(f"{base_seed}:{step}:{index}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") & (2**63 - 1)


class PromptSampler:
    def __init__(self, examples: list[PromptExample], prompts_per_step: int, samples_per_prompt: int, seed: int,
                 shuffle: bool = True, same_initial_noise: bool = False):
        if not examples:
            raise ValueError("PromptSampler needs at least one prompt")
        self.examples = examples
        self.prompts_per_step = prompts_per_step
        self.samples_per_prompt = samples_per_prompt
        self.seed = seed
        self.shuffle = shuffle
        self.same_initial_noise = same_initial_noise
        self._orders: dict[int, list[int]] = {}

    def _epoch_order(self, epoch: int) -> list[int]:
        if not self.shuffle:
            return list(range(len(self.examples)))
        if epoch not in self._orders:  # a pure function of (seed, epoch), cached
            generator = torch.Generator().manual_seed(sample_seed(self.seed, -1, epoch))
            self._orders = {epoch: torch.randperm(len(self.examples), generator=generator).tolist()}
        return self._orders[epoch]

    def _positions(self, step: int) -> list[int]:
        """Manifest rows of this step: positions [step·P, (step+1)·P) of the concatenated
        per-epoch permutations (no repeats within an epoch)."""
        size = len(self.examples)
        start = step * self.prompts_per_step
        rows = []
        for position in range(start, start + self.prompts_per_step):
            epoch, offset = divmod(position, size)
            rows.append(self._epoch_order(epoch)[offset])
        return rows

    def sample(self, step: int) -> PromptGroupBatch:
        n = self.samples_per_prompt
        chosen = [self.examples[row] for row in self._positions(step)]
        size = len(chosen) * n
        seeds = [sample_seed(self.seed, step, i) for i in range(size)]
        if self.same_initial_noise:
            seeds = [seeds[(i // n) * n] for i in range(size)]
        return PromptGroupBatch(
            prompts=[ex.prompt for ex in chosen for _ in range(n)],
            prompt_ids=torch.tensor([ex.prompt_id for ex in chosen for _ in range(n)], dtype=torch.long),
            group_ids=torch.arange(len(chosen)).repeat_interleave(n),
            seeds=torch.tensor(seeds, dtype=torch.long),
            metadata=[dict(ex.metadata) for ex in chosen for _ in range(n)],
        )
