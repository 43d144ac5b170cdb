import pytest
import torch
from support import make_batch

from genalign.rollout.batch import TrajectoryBatch


def test_split_then_cat_round_trips_every_field():
    batch = make_batch()
    batch.validate()
    parts = batch.split(4)
    assert [len(p) for p in parts] == [4, 2]
    joined = TrajectoryBatch.cat(parts)
    assert joined.prompts == batch.prompts
    assert torch.equal(joined.latents, batch.latents)
    assert torch.equal(joined.condition.pooled, batch.condition.pooled)
    assert joined.metadata == batch.metadata


def test_index_selects_samples_and_keeps_schedule():
    batch = make_batch()
    picked = batch.index(torch.tensor([5, 0]))
    assert picked.prompts == ["p5", "p0"]
    assert torch.equal(picked.log_probs, batch.log_probs[[5, 0]])
    assert torch.equal(picked.sigmas, batch.sigmas)


def test_validate_reports_mismatched_fields():
    batch = make_batch()
    batch.log_probs = batch.log_probs[:, :2]
    with pytest.raises(ValueError, match="log_probs"):
        batch.validate()


def test_cat_refuses_different_schedules():
    a, b = make_batch(), make_batch(start=6)
    b.sigmas = b.sigmas * 0.5
    with pytest.raises(ValueError, match="schedules"):
        TrajectoryBatch.cat([a, b])
