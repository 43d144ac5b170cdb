"""PromptSampler: pure in (seed, step), epoch-wise coverage, group layout, seeds."""

import pytest
import torch

from genalign.data.prompts import PromptExample
from genalign.data.sampler import SEED_LIMIT, PromptGroupBatch, PromptSampler, sample_seed


def examples(count: int) -> list[PromptExample]:
    return [PromptExample(f"prompt {i}", i, f"m.txt:{i + 1}", {"row": i}) for i in range(count)]


def test_sample_seed_is_deterministic_in_range_and_distinct():
    assert sample_seed(7, 3, 2) == sample_seed(7, 3, 2)
    seeds = {sample_seed(7, step, index) for step in range(50) for index in range(40)}
    assert len(seeds) == 50 * 40
    assert all(0 <= seed < SEED_LIMIT for seed in seeds)
    assert sample_seed(7, 3, 2) != sample_seed(8, 3, 2)


def test_sample_is_a_pure_function_of_seed_and_step():
    first = PromptSampler(examples(10), 3, 2, seed=5)
    second = PromptSampler(examples(10), 3, 2, seed=5)
    later = [first.sample(step) for step in (4, 1, 9)]  # any order, no cursor
    for step, batch in zip((4, 1, 9), later):
        again = second.sample(step)
        assert batch.prompts == again.prompts
        assert torch.equal(batch.seeds, again.seeds) and torch.equal(batch.prompt_ids, again.prompt_ids)
    assert not torch.equal(first.sample(1).seeds, PromptSampler(examples(10), 3, 2, seed=6).sample(1).seeds)


def test_group_layout_and_metadata():
    batch = PromptSampler(examples(6), prompts_per_step=3, samples_per_prompt=4, seed=0).sample(2)
    assert len(batch) == 12
    assert batch.group_ids.tolist() == [0] * 4 + [1] * 4 + [2] * 4
    assert batch.prompt_ids.dtype == batch.group_ids.dtype == batch.seeds.dtype == torch.int64
    for group in range(3):
        members = range(group * 4, group * 4 + 4)
        assert len({batch.prompts[i] for i in members}) == 1
        assert len({int(batch.prompt_ids[i]) for i in members}) == 1
        assert all(batch.metadata[i] == {"row": int(batch.prompt_ids[i])} for i in members)
    batch.metadata[0]["row"] = -1  # a copy: mutating it leaves the examples alone
    assert PromptSampler(examples(6), 3, 4, seed=0).sample(2).metadata[0] != {"row": -1}


def test_seeds_distinct_per_sample_or_shared_per_group():
    distinct = PromptSampler(examples(6), 3, 4, seed=1).sample(5)
    assert distinct.seeds.tolist() == [sample_seed(1, 5, i) for i in range(12)]
    shared = PromptSampler(examples(6), 3, 4, seed=1, same_initial_noise=True).sample(5)
    assert shared.prompts == distinct.prompts
    assert torch.equal(shared.seeds, distinct.seeds)  # SDE noise stays per sample
    assert torch.equal(distinct.init_seeds, distinct.seeds)
    for group in range(3):
        assert shared.init_seeds[group * 4 : group * 4 + 4].tolist() == [sample_seed(1, 5, group * 4)] * 4
    assert len(set(shared.init_seeds.tolist())) == 3


def test_every_prompt_once_per_epoch_even_when_steps_straddle_epochs():
    # 7 prompts, 3 per step: positions 0..20 are exactly three epochs of 7.
    sampler = PromptSampler(examples(7), 3, 1, seed=11)
    drawn = [row for step in range(7) for row in sampler.sample(step).prompt_ids.tolist()]
    epochs = [drawn[0:7], drawn[7:14], drawn[14:21]]
    assert all(sorted(epoch) == list(range(7)) for epoch in epochs)
    assert epochs[0] != epochs[1] or epochs[1] != epochs[2]  # reshuffled per epoch
    assert epochs[0] != list(range(7))  # shuffled at all


def test_no_shuffle_walks_the_manifest_in_order():
    sampler = PromptSampler(examples(5), 2, 3, seed=0, shuffle=False)
    assert sampler.sample(0).prompt_ids.tolist() == [0, 0, 0, 1, 1, 1]
    assert sampler.sample(2).prompt_ids.tolist() == [4, 4, 4, 0, 0, 0]  # wraps into the next epoch


def test_more_prompts_per_step_than_manifest_rows():
    batch = PromptSampler(examples(2), 5, 1, seed=3).sample(0)
    ids = batch.prompt_ids.tolist()
    assert sorted(ids[:2]) == [0, 1] and sorted(ids[2:4]) == [0, 1]


def test_index_selects_a_shard():
    batch = PromptSampler(examples(4), 2, 2, seed=0).sample(0)
    shard = batch.index([2, 3])
    assert shard.prompts == batch.prompts[2:] and torch.equal(shard.seeds, batch.seeds[2:])
    assert shard.group_ids.tolist() == [1, 1]


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"prompts_per_step": 0}, "rollout.rollout_batch_size"),
        ({"samples_per_prompt": 0}, "rollout.n"),
    ],
)
def test_bad_sizes_name_the_config_key(kwargs, message):
    arguments = {"prompts_per_step": 2, "samples_per_prompt": 2, **kwargs}
    with pytest.raises(ValueError, match=message):
        PromptSampler(examples(3), arguments["prompts_per_step"], arguments["samples_per_prompt"], seed=0)


def test_empty_manifest_and_negative_step_are_errors():
    with pytest.raises(ValueError, match="at least one prompt"):
        PromptSampler([], 1, 1, seed=0)
    with pytest.raises(ValueError, match="step must be >= 0"):
        PromptSampler(examples(3), 1, 1, seed=0).sample(-1)


def test_batch_fields_must_agree_in_length():
    with pytest.raises(ValueError, match="mismatched fields"):
        PromptGroupBatch(
            ["a", "b"],
            torch.zeros(2, dtype=torch.long),
            torch.zeros(1, dtype=torch.long),
            torch.zeros(2, dtype=torch.long),
            [{}, {}],
        )
