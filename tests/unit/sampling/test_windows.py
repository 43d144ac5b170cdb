"""SDE window schedules (Flow-GRPO-Fast §2.6, MixGRPO §3.2) and the stochastic-step mask."""

import pytest
import torch

from genalign.sampling.windows import WindowSchedule, sde_step_mask, trained_steps, window_bounds


def test_random_window_stays_in_range_covers_it_and_is_a_pure_function_of_the_step():
    # flow_grpo's fast trainer: start ~ UniformInt[lo, hi − size] inclusive; (0, 5), size 2 -> starts 0..3
    starts = [window_bounds("random", 2, 0, 5, step, seed=42)[0] for step in range(1, 201)]
    assert set(starts) == {0, 1, 2, 3}
    assert starts == [window_bounds("random", 2, 0, 5, step, seed=42)[0] for step in range(1, 201)]
    assert starts != [window_bounds("random", 2, 0, 5, step, seed=43)[0] for step in range(1, 201)]
    assert all(stop - start == 2 for start, stop in (window_bounds("random", 2, 0, 5, s, 42) for s in range(1, 20)))


def test_progressive_window_hand_sequence():
    # size 4 in [0, 9) (10 steps, hi = -1): starts 0..5 (P = 6); τ = 2, s = 1
    starts = [
        window_bounds("progressive", 4, 0, 9, step, seed=0, shift_every=2, shift_by=1)[0] for step in range(1, 15)
    ]
    assert starts == [0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 0, 0]
    # s = 2: positions 0, 2, 4 (P = 5 // 2 + 1 = 3), then roll back
    starts = [window_bounds("progressive", 4, 0, 9, step, seed=0, shift_every=1, shift_by=2)[0] for step in range(1, 8)]
    assert starts == [0, 2, 4, 0, 2, 4, 0]
    # a range that starts later: lo = 2
    assert window_bounds("progressive", 3, 2, 6, 2, seed=0, shift_every=1) == (3, 6)


def test_fixed_window_and_bad_arguments():
    assert window_bounds("fixed", 3, 0, 3, 17, seed=0) == (0, 3)  # FLUX-fast: window 3 in (0, 3)
    with pytest.raises(ValueError, match="does not fit"):
        window_bounds("fixed", 4, 0, 3, 1, seed=0)
    with pytest.raises(ValueError, match="schedule"):
        window_bounds("sliding", 2, 0, 5, 1, seed=0)
    schedule = WindowSchedule("progressive", 2, 0, 4, seed=0, shift_every=1)
    assert [schedule.bounds(s) for s in (1, 2, 3, 4)] == [(0, 2), (1, 3), (2, 4), (0, 2)]


def test_mask_window_and_ode_final_step():
    assert sde_step_mask(5, 0.7).tolist() == [True] * 5
    assert sde_step_mask(5, 0.7, (1, 3)).tolist() == [False, True, True, False, False]
    assert sde_step_mask(5, 0.7, ode_final_step=True).tolist() == [True, True, True, True, False]
    assert sde_step_mask(5, 0.0, (1, 3)).tolist() == [False] * 5  # the ODE evaluator
    with pytest.raises(ValueError, match="not inside"):
        sde_step_mask(5, 0.7, (4, 6))
    assert sde_step_mask(5, 0.7).dtype == torch.bool


def test_random_window_is_drawn_per_sampling_batch_deterministic_and_in_range():
    # Flow-GRPO-Fast draws a window in every pipeline call: here one per sampling batch, named by
    # its first sample's position in the step (chunks of 4 samples: batches 0, 4, 8, ...)
    schedule = WindowSchedule("random", 2, 0, 5, seed=42)
    assert schedule.draw == "per_batch"  # the default
    for step in (1, 2, 7):
        windows = [schedule.bounds(step, batch) for batch in range(0, 64, 4)]
        assert all(0 <= start and stop == start + 2 <= 5 for start, stop in windows)
        assert len(set(windows)) > 1  # batches of one step draw distinct windows
        assert windows == [schedule.bounds(step, batch) for batch in range(0, 64, 4)]  # a pure function
        assert windows == [window_bounds("random", 2, 0, 5, step, 42, batch=b) for b in range(0, 64, 4)]
    starts = {schedule.bounds(step, batch)[0] for step in range(1, 20) for batch in range(0, 64, 4)}
    assert starts == {0, 1, 2, 3}  # the whole of UniformInt[lo, hi − size]
    assert [schedule.bounds(3, b) for b in range(0, 64, 4)] != [schedule.bounds(4, b) for b in range(0, 64, 4)]


def test_per_step_draw_is_one_window_for_every_batch_of_a_step():
    schedule = WindowSchedule("random", 2, 0, 5, seed=42, draw="per_step")
    for step in range(1, 30):
        windows = {schedule.bounds(step, batch) for batch in range(0, 64, 4)}
        assert windows == {window_bounds("random", 2, 0, 5, step, seed=42)}  # the (seed, step) draw
    # progressive and fixed windows do not depend on the batch under either draw
    progressive = WindowSchedule("progressive", 2, 0, 4, seed=0, shift_every=1)
    assert {progressive.bounds(2, batch) for batch in range(0, 64, 4)} == {(1, 3)}
    with pytest.raises(ValueError, match="rollout.sde_window.draw"):
        WindowSchedule("random", 2, 0, 5, seed=0, draw="per_sample")


def test_trained_steps_are_each_samples_own():
    masks = torch.stack(
        [sde_step_mask(6, 0.7, (0, 2)), sde_step_mask(6, 0.7, (3, 5)), sde_step_mask(6, 0.7, (1, 3))]
    )  # [3, 6]: three windows
    seeds = torch.tensor([5, 6, 7])
    assert trained_steps(masks, 5, "first", seeds).tolist() == [[0, 1], [3, 4], [1, 2]]
    assert trained_steps(masks, 1, "first", seeds).tolist() == [[0], [3], [1]]
    no_window = sde_step_mask(6, 0.7, ode_final_step=True).expand(3, -1)  # [3, 6], steps 0..4
    drawn = trained_steps(no_window, 3, "random", seeds)  # [3, 3]
    assert all(len(set(row)) == 3 and row == sorted(row) and max(row) < 5 for row in drawn.tolist())
    assert torch.equal(drawn[1:], trained_steps(no_window[1:], 3, "random", seeds[1:]))  # per sample
    uneven = torch.stack([sde_step_mask(6, 0.7, (3, 5)), sde_step_mask(6, 0.7, (4, 6), ode_final_step=True)])
    with pytest.raises(ValueError, match="different numbers of trainable steps"):
        trained_steps(uneven, 5, "first", seeds[:2])
