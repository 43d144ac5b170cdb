"""Group advantages (docs/algorithms.md §2.4): hand values, slow-loop reference, zero-variance groups, aggregation."""

import itertools
import statistics

import pytest
import torch
from support import assert_close_reordered

from genalign.algorithms.advantages import (
    advantage_stats,
    aggregate_advantages,
    clip_advantages,
    group_advantages,
    zero_std_group_fraction,
)


def loop_reference(
    rewards, group_ids, *, per_prompt=True, global_std=True, std="population", eps=1e-4, normalize_by_std=True
):
    """Slow, obvious version: one Python pass per sample over its group."""
    values, ids = rewards.tolist(), group_ids.tolist()
    if not per_prompt:
        ids = [0] * len(ids)

    def spread(xs):
        if len(set(xs)) == 1:
            return 0.0
        return statistics.pstdev(xs) if std == "population" else statistics.stdev(xs)

    out = []
    for value, gid in zip(values, ids):
        group = [v for v, g in zip(values, ids) if g == gid]
        if len(set(group)) == 1:
            out.append(0.0)
            continue
        centred = value - statistics.fmean(group)
        if normalize_by_std:
            centred /= (spread(values) if global_std else spread(group)) + eps
        out.append(centred)
    return torch.tensor(out, dtype=torch.float32)


def test_hand_computed_population_global():
    # groups {0: [1, 3], 1: [2, 2]}; batch population std of [1, 3, 2, 2] = sqrt(0.5) = 0.707107
    # group 0: ∓1 / (0.707107 + 1e-4) = ∓1.414014 ; group 1 is constant -> exactly 0
    rewards = torch.tensor([1.0, 3.0, 2.0, 2.0])
    ids = torch.tensor([0, 0, 1, 1])
    adv = group_advantages(rewards, ids)
    torch.testing.assert_close(adv, torch.tensor([-1.414014, 1.414014, 0.0, 0.0]), atol=1e-6, rtol=0)
    assert adv[2].item() == 0.0 and adv[3].item() == 0.0
    assert adv.dtype == torch.float32


def test_hand_computed_unbiased_group_std():
    # group [1, 2, 6]: mean 3, unbiased std = sqrt((4 + 1 + 9) / 2) = sqrt(7) = 2.645751
    adv = group_advantages(
        torch.tensor([1.0, 2.0, 6.0]), torch.tensor([5, 5, 5]), global_std=False, std="unbiased", eps=0.0
    )
    torch.testing.assert_close(adv, torch.tensor([-2.0, -1.0, 3.0]) / 2.645751, atol=1e-6, rtol=0)


LAYOUTS = {
    "sorted": [0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2],
    "interleaved": [0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 2],
    "unsorted_sparse_ids": [41, 7, 7, 900, 41, 900, 7, 41, 900, 41, 7, 900],
    "uneven_with_singleton": [3, 3, 3, 8, 8, 1, 3, 8, 8, 8, 3, 3],
}


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize(
    "per_prompt,global_std,std,normalize_by_std",
    list(itertools.product([True, False], [True, False], ["population", "unbiased"], [True, False])),
)
def test_matches_loop_reference(layout, per_prompt, global_std, std, normalize_by_std):
    ids = torch.tensor(LAYOUTS[layout])
    rewards = torch.rand(len(ids), generator=torch.Generator().manual_seed(len(layout)))
    rewards[ids == ids[1]] = 0.25  # one constant group in every layout
    kwargs = dict(per_prompt=per_prompt, global_std=global_std, std=std, normalize_by_std=normalize_by_std)
    # vectorised vs loop: the group means and stds (sums of <= len(ids) terms) in another order,
    # relative errors that carry over to (r − mean) / std in the advantages' own scale
    assert_close_reordered(
        group_advantages(rewards, ids, **kwargs), loop_reference(rewards, ids, **kwargs), length=len(ids), depth=2
    )


@pytest.mark.parametrize("global_std", [True, False])
@pytest.mark.parametrize("eps", [1e-4, 0.0])
def test_zero_variance_group_is_exactly_zero(global_std, eps):
    # 0.1 summed three times is 0.30000000000000004: a mean-based check would leave ~1e-13 here
    rewards = torch.tensor([0.1, 0.1, 0.1, 0.0, 1.0, 0.5], dtype=torch.float64)
    ids = torch.tensor([2, 2, 2, 9, 9, 9])
    adv = group_advantages(rewards, ids, global_std=global_std, eps=eps)
    assert adv[:3].tolist() == [0.0, 0.0, 0.0]
    assert bool(torch.isfinite(adv).all()) and adv[3] < 0 < adv[4]
    # the whole batch constant, eps = 0: no 0/0
    flat = group_advantages(torch.full((4,), 0.7), torch.tensor([0, 0, 1, 1]), global_std=global_std, eps=eps)
    assert flat.tolist() == [0.0] * 4


def test_unbiased_singleton_group_gets_zero():
    adv = group_advantages(
        torch.tensor([5.0, 1.0, 2.0]), torch.tensor([0, 1, 1]), global_std=False, std="unbiased", eps=0.0
    )
    assert adv[0].item() == 0.0 and bool(torch.isfinite(adv).all())


def test_per_prompt_false_normalises_the_whole_batch():
    # [0, 0, 2, 2] in two constant groups: per prompt all 0; over the batch mean 1, std 1 -> ∓1/(1+1e-4)
    rewards, ids = torch.tensor([0.0, 0.0, 2.0, 2.0]), torch.tensor([0, 0, 1, 1])
    assert group_advantages(rewards, ids).tolist() == [0.0] * 4
    torch.testing.assert_close(
        group_advantages(rewards, ids, per_prompt=False), torch.tensor([-1.0, -1.0, 1.0, 1.0]) / 1.0001
    )


def test_mean_centering_only():
    adv = group_advantages(torch.tensor([1.0, 4.0, 10.0, 20.0]), torch.tensor([0, 0, 1, 1]), normalize_by_std=False)
    assert adv.tolist() == [-1.5, 1.5, -5.0, 5.0]


def test_invalid_inputs_are_errors():
    rewards, ids = torch.tensor([1.0, 2.0]), torch.tensor([0, 0])
    with pytest.raises(ValueError, match="algorithm.advantage.std"):
        group_advantages(rewards, ids, std="sample")
    with pytest.raises(ValueError, match="group_ids shape"):
        group_advantages(rewards, torch.tensor([0, 0, 1]))
    with pytest.raises(ValueError, match="not finite at samples \\[1\\]"):
        group_advantages(torch.tensor([1.0, float("nan")]), ids)
    with pytest.raises(ValueError, match="eps"):
        group_advantages(rewards, ids, eps=-1.0)


def test_zero_std_group_fraction():
    rewards = torch.tensor([0.1, 0.1, 0.1, 0.0, 1.0, 0.0, 3.0, 3.0], dtype=torch.float64)
    ids = torch.tensor([4, 4, 4, 1, 1, 1, 0, 0])  # group 4 and group 0 are constant
    assert zero_std_group_fraction(rewards, ids) == pytest.approx(2 / 3)


def test_aggregate_weighted_sum_and_advantage_sum():
    ids = torch.tensor([0, 0, 1, 1, 0, 1])
    ocr = torch.tensor([0.0, 1.0, 0.5, 0.5, 0.2, 0.9])
    aesthetic = torch.tensor([5.0, 6.0, 4.0, 7.0, 5.5, 4.5])
    weights = {"ocr": 1.0, "aesthetic": 0.25}
    kwargs = dict(global_std=False, std="unbiased")
    weighted = aggregate_advantages({"ocr": ocr, "aesthetic": aesthetic}, weights, ids, "weighted_sum", **kwargs)
    torch.testing.assert_close(weighted, group_advantages(ocr + 0.25 * aesthetic, ids, **kwargs))
    summed = aggregate_advantages({"ocr": ocr, "aesthetic": aesthetic}, weights, ids, "advantage_sum", **kwargs)
    expected = group_advantages(ocr, ids, **kwargs) + 0.25 * group_advantages(aesthetic, ids, **kwargs)
    torch.testing.assert_close(summed, expected)
    assert not torch.allclose(weighted, summed)


def test_aggregate_errors():
    ids, scores = torch.tensor([0, 0]), {"ocr": torch.tensor([0.0, 1.0])}
    with pytest.raises(ValueError, match="weighted_sum.*advantage_sum"):
        aggregate_advantages(scores, {"ocr": 1.0}, ids, "mean")
    with pytest.raises(ValueError, match="same rewards"):
        aggregate_advantages(scores, {"pickscore": 1.0}, ids, "weighted_sum")
    with pytest.raises(ValueError, match="at least one"):
        aggregate_advantages({}, {}, ids, "weighted_sum")


def test_clip_and_stats():
    adv = torch.tensor([-7.0, -1.0, 2.0, 6.0])
    assert clip_advantages(adv, 5.0).tolist() == [-5.0, -1.0, 2.0, 5.0]
    with pytest.raises(ValueError, match="adv_clip_max"):
        clip_advantages(adv, 0.0)
    stats = advantage_stats(torch.tensor([-1.0, 1.0, 3.0, -3.0]))
    # mean 0, population std sqrt((1 + 1 + 9 + 9) / 4) = sqrt(5)
    assert stats == pytest.approx({"mean": 0.0, "std": 5**0.5, "min": -3.0, "max": 3.0, "abs_mean": 2.0})
