"""Sharding an evaluation over ranks: contiguous shards, padded so every rank runs as many
forwards and sends tensors of one shape, gathered once to rank 0 in order; a lost or doubled
sample is an error. Ranks are simulated in one process with a recording gather (the 2-rank gloo
run is tests/integration/test_distributed_eval.py)."""

from __future__ import annotations

import pytest
import torch

from genalign.data.sampler import PromptGroupBatch
from genalign.evaluation.sharded import Shard, evaluate_samples, ordered_rows, padded_positions, shard_range
from genalign.rewards.scores import RewardScores


@pytest.mark.parametrize("total,world", [(5, 2), (7, 3), (1, 2), (4, 4), (3, 5)])
def test_shards_cover_every_sample_once_and_pad_to_one_length(total, world):
    ranges = [shard_range(total, rank, world) for rank in range(world)]
    assert [i for start, end in ranges for i in range(start, end)] == list(range(total))
    padded = [padded_positions(total, Shard(rank, world)) for rank in range(world)]
    assert len({len(positions) for positions, _ in padded}) == 1  # every rank: ceil(total / world) samples
    assert sum(real for _, real in padded) == total


def test_ordered_rows_drops_fillers_and_refuses_lost_or_doubled_samples():
    assert ordered_rows(torch.tensor([2, 3, -1, 0, 1]), 4).tolist() == [3, 4, 0, 1]
    with pytest.raises(RuntimeError, match="1 sample\\(s\\) missing and 1 doubled out of 4"):
        ordered_rows(torch.tensor([0, 1, 1, 3]), 4)


class Runtime:
    def score(self, images, prompts, metadata):
        return RewardScores({"value": images.float().mean((1, 2, 3))}, {"value": 1.0})


def samples(count):
    return PromptGroupBatch(
        [f"p{i}" for i in range(count)],
        torch.arange(count),
        torch.arange(count),
        torch.arange(count) * 10,
        [{} for _ in range(count)],
    )


def sampler(seen):
    def sample(every, positions):
        seen.append(list(positions))
        images = torch.stack([torch.full((3, 2, 2), i, dtype=torch.uint8) for i in positions])  # image i is all i
        return FakeBatch(images, [every.prompts[i] for i in positions])

    return sample


class FakeBatch:
    """What evaluate_samples reads of a TrajectoryBatch."""

    def __init__(self, images, prompts):
        self.images, self.prompts, self.metadata = images, prompts, [{} for _ in prompts]


@pytest.mark.parametrize("total,world", [(5, 2), (1, 2), (7, 3)])
def test_ranks_gather_every_sample_once_in_order(total, world):
    sent: list[tuple[int, torch.Tensor]] = []

    def gather_for(rank):
        def gather(tensor):  # ranks 1.. run first and record; rank 0 runs last and receives all
            sent.append((rank, tensor))
            if rank != 0:
                return None
            mine = [t for r, t in sent if r == 0]
            index = len(mine) - 1
            return [[t for r, t in sent if r == other][index] for other in range(world)]

        return gather

    seen = []
    outcomes = [
        evaluate_samples(sampler(seen), samples(total), {"r": Runtime()}, Shard(rank, world, gather_for(rank)))
        for rank in [*range(1, world), 0]
    ]
    assert all(o.scores is None for o in outcomes[:-1])
    main = outcomes[-1]
    assert main.images[:, 0, 0, 0].tolist() == list(range(total))  # each sample once, in order
    assert main.scores["r"].total.tolist() == [float(i) for i in range(total)]
    assert len({len(positions) for positions in seen}) == 1  # every rank sampled as many (fillers included)
