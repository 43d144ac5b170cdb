"""SDE window schedules (Flow-GRPO-Fast §2.6, MixGRPO §3.2) and the stochastic-step mask."""

import pytest
import torch

from genalign.sampling.windows import WindowSchedule, sde_step_mask, window_bounds


def test_random_window_stays_in_range_covers_it_and_is_a_pure_function_of_the_step():
    # flow_grpo's fast trainer: start ~ UniformInt[lo, hi − size] inclusive; (0, 5), size 2 -> starts 0..3
    starts = [window_bounds("random", 2, 0, 5, step, seed=42)[0] for step in range(1, 201)]
    assert set(starts) == {0, 1, 2, 3}
    assert starts == [window_bounds("random", 2, 0, 5, step, seed=42)[0] for step in range(1, 201)]
    assert starts != [window_bounds("random", 2, 0, 5, step, seed=43)[0] for step in range(1, 201)]
    assert all(stop - start == 2 for start, stop in (window_bounds("random", 2, 0, 5, s, 42) for s in range(1, 20)))


def test_progressive_window_hand_sequence():
    # size 4 in [0, 9) (10 steps, hi = -1): starts 0..5 (P = 6); τ = 2, s = 1
    starts = [window_bounds("progressive", 4, 0, 9, step, seed=0, shift_every=2, shift_by=1)[0]
              for step in range(1, 15)]
    assert starts == [0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 0, 0]
    # s = 2: positions 0, 2, 4 (P = 5 // 2 + 1 = 3), then roll back
    starts = [window_bounds("progressive", 4, 0, 9, step, seed=0, shift_every=1, shift_by=2)[0]
              for step in range(1, 8)]
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
