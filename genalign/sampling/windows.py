"""SDE windows: which denoising steps of a rollout are stochastic (and so trained).

Where it fits: the collector asks `window_bounds` for the step's window and builds the
trajectory's `sde_mask` with `sde_step_mask`; steps outside the window are Euler ODE steps
with log-prob 0, and the algorithm trains only stochastic steps. Two published schedules:

* Flow-GRPO-Fast (docs/algorithms.md §2.6, flow_grpo `train_sd3_fast.py`): a fresh random start per
  sampling batch, start ~ UniformInt[lo, hi − size] (inclusive both ends, Python `randint`).
  The reference draws it inside each pipeline call; genalign's sampling batch is one rollout
  chunk (`rollout.sample_batch_size` consecutive samples of the step), named by the position
  of its first sample in the step. `draw="per_step"` draws one window for the whole step.
* MixGRPO "progressive" (§3.2, MixGRPO code `grpo_states.py`): start at lo, move by `shift_by` steps
  every `shift_every` iterations, roll back to lo when the window would leave the range.
* "fixed": always [lo, lo + size) (FLUX-fast's window 3 in (0, 3); MixGRPO-Flash*).

Every schedule is a pure function of (schedule, training step, run seed, sampling batch): the
random start is drawn from a generator seeded by a hash of (seed, step, batch) — of (seed,
step) with draw="per_step" — and the progressive position is
computed from the step, not advanced in place. So a resumed run re-derives the window
exactly and a checkpoint needs nothing extra to save.

Departure from MixGRPO: its start runs up to N − 2 and the window is cut at the end of the
schedule (shrinking); here the whole window always lies inside [lo, hi), so every iteration
trains `size` steps (the rollback happens one position earlier).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import get_args

import torch

# the config's Literal of schedule names; `WindowSchedule` here is the resolved schedule class below
from genalign.rollout.config import WindowDraw
from genalign.rollout.config import WindowSchedule as ScheduleName

WINDOW_SCHEDULES = get_args(ScheduleName)
WINDOW_DRAWS = get_args(WindowDraw)


def _window_seed(seed: int, step: int, batch: int | None) -> int:
    key = f"sde_window:{seed}:{step}" if batch is None else f"sde_window:{seed}:{step}:batch{batch}"
    digest = hashlib.blake2b(key.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") % 2**63


def window_bounds(
    schedule: ScheduleName,
    size: int,
    lo: int,
    hi: int,
    step: int,
    seed: int,
    shift_every: int = 1,
    shift_by: int = 1,
    batch: int | None = None,
) -> tuple[int, int]:
    """[start, stop) of the SDE window at training step `step` (>= 1), inside [lo, hi).

    random:      start ~ UniformInt[lo, hi − size], drawn from (seed, step, batch); `batch`
                 None draws one start for the whole step, from (seed, step)
    progressive: k = (step − 1) // shift_every; positions lo, lo + s, … ≤ hi − size cycle:
                 start = lo + (k mod P)·s, P = (hi − size − lo) // s + 1
    fixed:       start = lo
    """
    if schedule not in WINDOW_SCHEDULES:
        raise ValueError(f"rollout.sde_window.schedule={schedule!r}: choose one of {WINDOW_SCHEDULES}")
    if size < 1 or lo < 0 or hi - lo < size:
        raise ValueError(f"rollout.sde_window: size {size} does not fit in the range [{lo}, {hi})")
    if step < 1 or shift_every < 1 or shift_by < 1:
        raise ValueError(f"step ({step}), shift_every ({shift_every}) and shift_by ({shift_by}) must be >= 1")
    last_start = hi - size
    if schedule == "fixed":
        start = lo
    elif schedule == "random":
        generator = torch.Generator().manual_seed(_window_seed(seed, step, batch))
        start = int(torch.randint(lo, last_start + 1, (1,), generator=generator))
    else:
        positions = (last_start - lo) // shift_by + 1
        start = lo + (((step - 1) // shift_every) % positions) * shift_by
    return start, start + size


def sde_step_mask(
    num_steps: int, noise_level: float, window: tuple[int, int] | None = None, ode_final_step: bool = False
) -> torch.Tensor:
    """Which steps are stochastic [T] bool. No window: every step when noise_level > 0
    (Flow-GRPO samples all steps with the SDE; `algorithm.timestep_fraction` then leaves the
    nearly deterministic last step out of training). A window [start, stop): only its steps.
    `ode_final_step`: the final step is deterministic whatever the window (DanceGRPO's x̂0
    decode). noise_level == 0 (the ODE evaluator): none."""
    mask = torch.full((num_steps,), noise_level > 0, dtype=torch.bool)  # [T]
    if ode_final_step:
        mask[-1] = False
    if window is not None:
        start, stop = window
        if not 0 <= start < stop <= num_steps:
            raise ValueError(f"SDE window [{start}, {stop}) is not inside the {num_steps} denoising steps")
        inside = torch.zeros(num_steps, dtype=torch.bool)  # [T]
        inside[start:stop] = True
        mask &= inside
    return mask


@dataclass(frozen=True)
class WindowSchedule:
    """A resolved `rollout.sde_window` plus the run seed: `bounds(step, batch)` is the window of
    the sampling batch whose first sample sits at position `batch` of training step `step`."""

    schedule: ScheduleName
    size: int
    lo: int
    hi: int
    seed: int
    shift_every: int = 1
    shift_by: int = 1
    draw: WindowDraw = "per_batch"
    """"per_batch": a random window per sampling batch (Flow-GRPO-Fast); "per_step": one per step."""

    def __post_init__(self) -> None:
        if self.draw not in WINDOW_DRAWS:
            raise ValueError(f"rollout.sde_window.draw={self.draw!r}: choose one of {WINDOW_DRAWS}")

    def bounds(self, step: int, batch: int = 0) -> tuple[int, int]:
        return window_bounds(
            self.schedule,
            self.size,
            self.lo,
            self.hi,
            step,
            self.seed,
            self.shift_every,
            self.shift_by,
            batch if self.draw == "per_batch" else None,
        )


def _selection_seed(seed: int) -> int:
    digest = hashlib.blake2b(f"trained_steps:{seed}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") % 2**63


def trained_steps(sde_mask: torch.Tensor, count: int, selection: str, seeds: torch.Tensor) -> torch.Tensor:
    """[B, K] int64: the denoising steps each sample trains, ascending, from its own stochastic
    steps `sde_mask` [B, T] (samples of one step may have different SDE windows).

    first:  the first `count` stochastic steps of the row (Flow-GRPO, Flow-GRPO-Fast).
    random: `count` of the row's stochastic steps before the final one, drawn from a generator
            seeded by the sample's seed [B] (DanceGRPO draws a permutation per sample).
    Every row trains the same number K = min(count, available) of steps (the update normalises
    by K); rows with different numbers available are an error."""
    if selection not in ("first", "random"):
        raise ValueError(f"algorithm.timestep_selection={selection!r}: choose first or random")
    num_steps = sde_mask.shape[1]
    rows = []
    for mask, seed in zip(sde_mask, seeds.tolist()):
        stochastic = torch.nonzero(mask).flatten()  # [S]
        if selection == "first":
            rows.append(stochastic[:count])
            continue
        candidates = stochastic[stochastic < num_steps - 1]  # [S'] the final step never
        order = torch.randperm(len(candidates), generator=torch.Generator().manual_seed(_selection_seed(seed)))
        rows.append(candidates[order[:count]].sort().values)  # [<=count]
    sizes = {len(row) for row in rows}
    if len(sizes) > 1:
        raise ValueError(
            f"samples of one step have different numbers of trainable steps {sorted(sizes)}: their SDE "
            "windows leave different numbers of stochastic steps (rollout.sde_window with "
            "rollout.ode_final_step and a range that reaches the final step)"
        )
    if not rows:
        return torch.zeros(0, 0, dtype=torch.long)
    return torch.stack(rows).long()  # [B, K]
