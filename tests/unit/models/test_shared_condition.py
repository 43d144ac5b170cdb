"""SharedCondition: a step's prompts stored once each, gathered bit for bit per sample."""

import pickle

import torch

from genalign.models.base import Condition, SharedCondition


def _distinct(prompts: int = 2, with_negative: bool = True) -> Condition:
    g = torch.Generator().manual_seed(0)
    embeds = torch.randn(prompts, 5, 3, generator=g)  # [U, L, D]
    negative = torch.randn(1, 5, 3, generator=g).expand(prompts, 5, 3).clone() if with_negative else None
    return Condition(
        embeds=embeds,
        pooled=torch.randn(prompts, 4, generator=g),
        negative_embeds=negative,
        negative_pooled=torch.zeros(prompts, 4) if with_negative else None,
    )


def test_rows_are_stored_once_and_the_negative_once():
    distinct = _distinct()
    rows = torch.tensor([0, 0, 0, 1, 1, 1])
    shared = SharedCondition.of(distinct, rows)
    assert shared.table.embeds.shape[0] == 2 and shared.table.negative_embeds.shape[0] == 1  # 2 prompts, 1 negative
    per_sample = distinct.index(rows)
    gathered = shared.to("cpu")
    assert isinstance(gathered, Condition) and len(shared) == 6
    for name in ("embeds", "pooled", "negative_embeds", "negative_pooled"):
        assert torch.equal(getattr(gathered, name), getattr(per_sample, name)), name
        assert torch.equal(getattr(shared, name), getattr(per_sample, name)), name  # read access gathers too
    assert gathered.mask is None


def test_differing_negatives_are_kept_per_prompt():
    distinct = _distinct()
    distinct.negative_embeds[1] += 1
    shared = SharedCondition.of(distinct, torch.tensor([1, 0]))
    assert shared.table.negative_embeds.shape[0] == 2
    assert torch.equal(shared.to("cpu").negative_embeds, distinct.negative_embeds[[1, 0]])


def test_index_and_cat_keep_one_table_and_match_per_sample_rows():
    distinct = _distinct(3)
    rows = torch.tensor([0, 0, 1, 1, 2, 2])
    shared = SharedCondition.of(distinct, rows)
    chunks = [shared.index([0, 1, 2]), shared.index([3, 4, 5])]
    joined = SharedCondition.cat(chunks)
    assert joined.table.embeds.shape[0] == 3  # the chunks' one table, not two
    assert torch.equal(joined.to("cpu").embeds, distinct.index(rows).embeds)
    # a copy of the same table (a second Ray worker encoded the same step) is recognised as equal
    copy = pickle.loads(pickle.dumps(shared.index([4, 5])))
    both = SharedCondition.cat([shared.index([0, 1]), copy])
    assert both.table.embeds.shape[0] == 3
    assert torch.equal(both.to("cpu").embeds, distinct.index(torch.tensor([0, 0, 2, 2])).embeds)
    # different tables are concatenated with offset rows
    other = SharedCondition.of(_distinct(1), torch.tensor([0, 0]))
    mixed = SharedCondition.cat([shared.index([2]), other])
    assert mixed.table.embeds.shape[0] == 4 and mixed.table.negative_embeds.shape[0] == 2
    assert torch.equal(mixed.to("cpu").embeds[1:], other.to("cpu").embeds)
    assert torch.equal(mixed.to("cpu").negative_embeds[1:], other.to("cpu").negative_embeds)


def test_without_cfg_there_is_no_negative():
    shared = SharedCondition.of(_distinct(2, with_negative=False), torch.tensor([1, 1, 0]))
    assert shared.negative_rows is None and shared.to("cpu").negative_embeds is None
