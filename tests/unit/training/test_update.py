"""One optimizer round: accumulation counts micro-batches x trained steps (docs/algorithms.md §2.5)."""

import dataclasses
from types import SimpleNamespace

import pytest
import torch
from support import assert_close_reordered, make_batch

from genalign.algorithms.advantages import trained_sample_indices
from genalign.algorithms.base import AlgorithmBase
from genalign.training.config import ActorConfig
from genalign.training.update import (
    UpdateContext,
    micro_batch_indices,
    micro_batch_schedule,
    micro_batch_sizes,
    run_update,
    unit_weight,
)

CPU_POLICY = SimpleNamespace(device=torch.device("cpu"))


class QuadraticAlgorithm(AlgorithmBase):
    """loss = mean_b (w * x_b - adv_b)^2 at each step: gradients are easy to reason about."""

    needs_reference = False
    needs_old_logprob = False
    stat_extremes = {"ratio": ("min", "max")}

    def __init__(self, weight, steps=(0, 1), drop_zero_advantage=False):
        self.weight = weight
        self.steps = list(steps)
        self.calls = []
        self.cfg = SimpleNamespace(drop_zero_advantage=drop_zero_advantage)

    def train_step_indices(self, batch):
        return self.steps

    def prepare_update(self, policy, batch, step_indices, micro_batch_size):
        return batch

    def compute_loss(self, policy, batch, advantages, step_index):
        self.calls.append((tuple(batch.prompts), step_index))
        x = batch.latents[:, step_index].flatten(1).mean(1)  # [b]
        per_sample = (self.weight * x - advantages) ** 2
        return per_sample.mean(), {"ratio": torch.ones(len(batch))}


def run(
    batch,
    advantages,
    accumulation,
    micro,
    lr=0.1,
    epochs=1,
    algo=None,
    drop_zero_advantage=False,
    on_optimizer_step=lambda: None,
    shuffle=False,
    **kwargs,
):
    weight = torch.nn.Parameter(torch.tensor(1.0)) if algo is None else algo.weight
    algo = algo or QuadraticAlgorithm(weight, drop_zero_advantage=drop_zero_advantage)
    opt = torch.optim.SGD([weight], lr=lr)
    actor = ActorConfig(
        gradient_accumulation_steps=accumulation, max_grad_norm=1e9, num_inner_epochs=epochs, shuffle_samples=shuffle
    )
    hooks = SimpleNamespace(on_optimizer_step=on_optimizer_step, on_micro_batch=lambda: None)
    context = UpdateContext(CPU_POLICY, algo, opt, [weight], actor, ema=hooks, **kwargs)
    result = run_update(context, batch, advantages, micro, torch.Generator().manual_seed(0))
    return weight, result, algo


def test_optimizer_steps_per_round_follow_accumulation():
    batch = make_batch(size=8)
    _, result, algo = run(batch, torch.randn(8), accumulation=2, micro=2)
    assert result.optimizer_steps == 2  # 4 micro-batches / 2
    assert len(algo.calls) == 4 * 2  # every micro-batch at every trained step
    metrics = result.metrics()
    assert metrics["ratio"] == 1.0
    assert (metrics["ratio_min"], metrics["ratio_max"]) == (1.0, 1.0)  # the algorithm's declared extremes


def test_full_accumulation_equals_one_big_batch():
    batch = make_batch(size=8)
    adv = torch.randn(8)
    small, _, _ = run(batch, adv, accumulation=4, micro=2)
    big, _, _ = run(batch, adv, accumulation=1, micro=8)
    # 4 accumulated micro-batch gradients vs one sum over the 8 samples x 3 steps: rounding only
    assert_close_reordered(small, big, length=8 * 3)


def test_micro_batch_indices_cover_every_sample_once():
    parts = micro_batch_indices(10, 4, shuffle=True, generator=torch.Generator().manual_seed(3))
    assert sorted(torch.cat(parts).tolist()) == list(range(10))
    assert [len(p) for p in parts] == [4, 4, 2]


def test_micro_batches_in_sampling_order_or_a_seeded_shuffle_per_inner_epoch():
    """actor.shuffle_samples=false replays the units in the order they were sampled
    (train_sd3_fast.py, train_qwenimage.py); true, a seeded permutation drawn anew each inner
    epoch (train_sd3.py's randperm before each epoch's split)."""
    batch = make_batch(size=8)

    def order(shuffle: bool) -> list[tuple[str, ...]]:
        _, _, algo = run(batch, torch.randn(8), accumulation=1, micro=2, epochs=2, shuffle=shuffle)
        return [prompts for prompts, step in algo.calls if step == 0]  # one entry per micro-batch

    in_order = order(False)
    assert in_order == [tuple(batch.prompts[i : i + 2]) for i in range(0, 8, 2)] * 2
    shuffled = order(True)
    assert shuffled == order(True)  # seeded
    first, second = shuffled[:4], shuffled[4:]
    assert sorted(p for part in first for p in part) == sorted(batch.prompts) and first != in_order[:4]
    assert second != first  # a new permutation in the second inner epoch


def test_accumulation_counts_micro_batches_across_inner_epochs():
    """3 micro-batches x 2 epochs with accumulation 2: three optimizer steps of exactly two
    micro-batches each (a per-epoch counter would give one step 1.5x gradient and drop one)."""
    batch = make_batch(size=6)
    adv = torch.randn(6)
    algo = QuadraticAlgorithm(torch.nn.Parameter(torch.tensor(1.0)))
    calls_at_step = []
    _, result, _ = run(
        batch,
        adv,
        accumulation=2,
        micro=2,
        epochs=2,
        algo=algo,
        on_optimizer_step=lambda: calls_at_step.append(len(algo.calls)),
    )
    assert result.optimizer_steps == 3
    assert calls_at_step == [4, 8, 12]  # 2 micro-batches x 2 trained steps per optimizer step


def test_filter_keeps_nonzero_advantages_and_tops_up_to_the_micro_batch_count():
    adv = torch.tensor([0.0, 1.0, 0.0, -2.0, 0.0, 0.5, 0.0, 0.0])  # 3 non-zero
    kept = trained_sample_indices(adv, num_micro_batches=4, generator=torch.Generator().manual_seed(0))
    assert len(kept) == 4 and {1, 3, 5} <= set(kept.tolist())  # one zero-advantage sample put back
    kept = trained_sample_indices(adv, num_micro_batches=3, generator=torch.Generator().manual_seed(0))
    assert kept.tolist() == [1, 3, 5]  # already divisible: exactly the informative samples
    assert len(trained_sample_indices(torch.zeros(8), 4, torch.Generator())) == 0


def test_zero_advantage_samples_are_not_replayed():
    batch = make_batch(size=8)
    adv = torch.tensor([0.0, 1.0, 0.0, -2.0, 0.0, 0.5, 0.0, 0.7])  # 4 non-zero
    _, result, algo = run(batch, adv, accumulation=2, micro=2, drop_zero_advantage=True)
    replayed = {p for prompts, _ in algo.calls for p in prompts}
    assert replayed == {batch.prompts[i] for i in (1, 3, 5, 7)}
    assert result.optimizer_steps == 2  # 4 micro-batches of 1 sample: the count of micro-batches stays
    assert result.metrics()["trained_fraction"] == 0.5
    _, result, algo = run(batch, torch.zeros(8), accumulation=2, micro=2, drop_zero_advantage=True)
    assert (result.optimizer_steps, algo.calls) == (0, [])  # constant rewards everywhere: no update


def test_non_finite_loss_is_an_error_naming_the_step():
    batch = make_batch(size=4)
    adv = torch.tensor([1.0, float("nan"), 0.0, 0.0])
    with pytest.raises(FloatingPointError, match="non-finite loss nan at trained position 0"):
        run(batch, adv, accumulation=1, micro=4)


def test_fp16_loss_scaling_skips_an_overflowing_step_and_lowers_the_scale():
    """With a GradScaler an inf gradient skips that optimizer step (weights unchanged) and
    halves the scale, instead of raising; finite steps train as usual."""
    batch = make_batch(size=4)
    big = dataclasses.replace(batch, latents=batch.latents * 1e18)  # loss ~1e35, scaled gradient > 3.4e38
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**16, enabled=True)
    weight, result, _ = run(big, torch.zeros(4), accumulation=1, micro=4, scaler=scaler)
    assert (result.optimizer_steps, result.skipped_steps) == (1, 1)
    assert weight.item() == 1.0 and result.grad_scale == 2.0**15
    weight, result, _ = run(batch, torch.randn(4), accumulation=1, micro=4, scaler=scaler)
    assert result.skipped_steps == 0 and weight.item() != 1.0


def test_micro_batch_schedule_fills_short_ranks_and_counts_each_steps_units_over_ranks():
    """Rank 0 has micro-batches (2, 2, 1), rank 1 one of 2, rank 2 none: every rank runs 3
    slots per epoch, holding 4, 2 and 1 units over all ranks. With 2 epochs and accumulation
    2 (counted across epochs) the steps are slot pairs, normalised by the units all ranks
    train in them; with 1 epoch the odd last slot is a step of its own, not dropped gradients."""
    sizes = [micro_batch_sizes(5, 2), micro_batch_sizes(2, 2), micro_batch_sizes(0, 2)]
    schedule = micro_batch_schedule(sizes, epochs=2, accumulation=2)
    assert schedule.slots == 3 and schedule.step_units == (4 + 2, 1 + 4, 2 + 1)
    assert [schedule.closes_step(s) for s in range(6)] == [False, True, False, True, False, True]
    assert schedule.total_units == 14
    schedule = micro_batch_schedule(sizes, epochs=1, accumulation=2)
    assert schedule.step_units == (6, 1) and [schedule.closes_step(s) for s in range(3)] == [False, True, True]
    assert micro_batch_sizes(0, 4) == [] and micro_batch_indices(0, 4, True, torch.Generator()) == []
    assert schedule.rank_step_units == ((4, 1), (2, 0), (0, 0))  # each rank's own units per step


def test_unit_weight_rank_mean_and_global_unit_mean():
    """Rank 0 trains (2, 2, 1) units, rank 1 (2), one optimizer step of 3 slots, K = 2
    positions. global_unit_mean: b·W/(K·N) with N = 7 on both ranks; rank_mean: b/(K·n_rank).
    Summed over a rank's slots, rank_mean gives each rank weight 1 (its own mean); global gives
    rank r its share n_r·W/N. Equal counts: both are 1/(K·accumulation) exactly."""
    from genalign.training.distributed import RankInfo

    schedule = micro_batch_schedule([micro_batch_sizes(5, 2), micro_batch_sizes(2, 2)], epochs=1, accumulation=3)
    zero, one = RankInfo(rank=0, world_size=2), RankInfo(rank=1, world_size=2)
    assert unit_weight(2, 2, schedule, 0, zero, "global_unit_mean") == 2 * 2 / (2 * 7)
    assert unit_weight(1, 2, schedule, 2, zero, "global_unit_mean") == 1 * 2 / (2 * 7)
    assert unit_weight(2, 2, schedule, 0, one, "global_unit_mean") == 2 * 2 / (2 * 7)
    assert unit_weight(2, 2, schedule, 0, zero, "rank_mean") == 2 / (2 * 5)
    assert unit_weight(2, 2, schedule, 0, one, "rank_mean") == 2 / (2 * 2)
    equal = micro_batch_schedule([micro_batch_sizes(4, 2)] * 2, epochs=1, accumulation=2)
    for mode in ("rank_mean", "global_unit_mean"):
        assert unit_weight(2, 3, equal, 1, one, mode) == 1 / (3 * 2)
    with pytest.raises(ValueError, match="actor.loss_normalisation='per_token'"):
        unit_weight(2, 2, schedule, 0, zero, "per_token")


def test_an_optimizer_step_is_the_mean_over_its_units_when_micro_batches_differ():
    """5 samples in micro-batches of 2, 2, 1 with one optimizer step: the gradient is the mean
    over the 5 samples (each micro-batch's mean weighted by its size), as one micro-batch of 5."""
    batch = make_batch(size=5)
    adv = torch.randn(5)
    uneven, result, _ = run(batch, adv, accumulation=3, micro=2)
    whole, _, _ = run(batch, adv, accumulation=1, micro=5)
    assert result.optimizer_steps == 1
    assert_close_reordered(uneven, whole, length=5 * 2)  # 5 samples x 2 steps summed in another grouping


def test_a_partial_last_accumulation_group_is_a_step_of_its_own():
    batch = make_batch(size=6)
    _, result, algo = run(batch, torch.randn(6), accumulation=2, micro=2)  # 3 micro-batches
    assert result.optimizer_steps == 2 and len(algo.calls) == 3 * 2
