"""`TokenTrajectoryBatch`: the trajectory surface (index/split/cat/to/validate) on token rollouts."""

from __future__ import annotations

import pytest
import torch

from genalign.models.base import TokenCondition
from genalign.rollout.batch import cat_batches
from genalign.rollout.token_batch import TokenTrajectoryBatch


def make_token_batch(size=4, tokens=3, prompt_len=5, start=0, guidance=5.0):
    ids = torch.arange(size * prompt_len).view(size, prompt_len) + 10 * start
    return TokenTrajectoryBatch(
        prompts=[f"p{start + i}" for i in range(size)],
        prompt_ids=torch.arange(start, start + size),
        group_ids=torch.arange(size) // 2,
        seeds=torch.arange(size) + 100 + start,
        condition=TokenCondition(ids, torch.ones_like(ids), ids + 1, torch.ones_like(ids)),
        tokens=torch.randint(0, 9, (size, tokens)),
        log_probs=torch.randn(size, 1, tokens),
        images=torch.zeros(size, 3, 4, 4, dtype=torch.uint8),
        guidance_scale=guidance,
        metadata=[{"i": start + i} for i in range(size)],
    )


def test_index_split_and_cat_round_trip():
    batch = make_token_batch(5)
    batch.validate()
    joined = cat_batches(batch.split(2))
    assert isinstance(joined, TokenTrajectoryBatch) and joined.prompts == batch.prompts
    for name in TokenTrajectoryBatch.ROW_TENSORS[:-1]:
        assert torch.equal(getattr(joined, name), getattr(batch, name)), name
    assert torch.equal(joined.condition.negative_input_ids, batch.condition.negative_input_ids)
    picked = batch.index([3, 1])
    assert picked.prompts == ["p3", "p1"] and picked.metadata == [{"i": 3}, {"i": 1}]
    assert torch.equal(picked.tokens, batch.tokens[[3, 1]]) and len(picked.condition) == 2
    assert batch.num_steps == 1 and batch.num_tokens == 3


def test_cat_left_pads_prompts_of_different_lengths_with_masked_zeros():
    short, long = make_token_batch(2, prompt_len=3), make_token_batch(2, prompt_len=5, start=2)
    joined = TokenTrajectoryBatch.cat([short, long])
    assert joined.condition.input_ids.shape == (4, 5)
    assert joined.condition.attention_mask[:2].tolist() == [[0, 0, 1, 1, 1]] * 2
    assert torch.equal(joined.condition.input_ids[:2, 2:], short.condition.input_ids)


def test_cat_refuses_mixed_sampling_and_validate_names_bad_fields():
    with pytest.raises(ValueError, match="guidance or temperature"):
        TokenTrajectoryBatch.cat([make_token_batch(2), make_token_batch(2, guidance=1.0)])
    bad = make_token_batch(3)
    bad.log_probs = torch.zeros(3, 3)
    with pytest.raises(ValueError, match="log_probs"):
        bad.validate()
