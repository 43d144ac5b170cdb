"""A step's update and phase columns as the whole job's, not rank 0's.

Where it fits: step 7 of the loop (docs/architecture.md §2). Under torchrun each rank trains
its own units, so its loss, statistics and trained fraction are only its share of the step: a
rank whose groups all scored alike trains nothing while another trains. `step_columns` turns
this rank's `UpdateResult` and phase timings into sums, maxima and minima, reduces them over
ranks in one all-gather (`distributed.reduce_totals`, entered by every rank every step,
whatever it trained) and derives the columns from the job's totals, so every rank holds the
same row and rank 0 writes it. On one process the totals are its own and the columns what
they always were. Which reduction each column gets (docs/distributed.md, "What a multi-rank
run logs"):

* unit-weighted means over every rank's trained units: `loss` (each micro-batch's mean loss
  weighted by its units), each statistic of `compute_loss` (`policy_loss`, `kl`, `ratio`,
  `clip_frac*`, `approx_kl`, `log_prob_drift`, …: the mean of every value any rank recorded);
* global fractions: `trained_fraction` = units trained on all ranks / units on all ranks;
* maxima and minima over ranks: the `<stat>_max` / `<stat>_min` extremes an algorithm declares,
  the wall-clock phases (`time_*_s`: the job waits for its slowest rank) and peak GPU memory;
* sums: `time_cpu_s` (the CPU seconds of every rank's process: unlike the wall-clock they do
  not grow with other processes' load, so benchmarks can compare runs made side by side; with
  OMP_NUM_THREADS=1 and no workers they equal the wall-clock on an idle box);
* the same on every rank, taken as is: `optimizer_steps`, `skipped_steps`, `grad_scale` (the
  ranks share one micro-batch schedule and the sharded loss scaler's decision) and `grad_norm` /
  `grad_norm_max` (the norm of the reduced gradient).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from genalign.tracking.logs import console_summary
from genalign.training import distributed
from genalign.training.distributed import RankTotals
from genalign.training.memory import COLUMN as MEMORY_COLUMN

if TYPE_CHECKING:
    from genalign.training.update import UpdateResult

SUMMED_PHASES = frozenset({"time_cpu_s"})
"""Phase columns added over ranks; every other one (wall seconds, peak memory) is the largest rank's."""


def update_totals(result: UpdateResult) -> RankTotals:
    """This rank's share of the update columns. A statistic is named by every rank that ran
    `compute_loss` (a rank that only replayed its zero-weight filler has count 0), so the ranks
    exchange the same names."""
    totals = RankTotals(
        {
            "trained_units": float(result.trained_samples),
            "total_units": float(result.total_samples),
            "loss:sum": sum(loss * units for loss, units in zip(result.losses, result.loss_units)),
            "loss:units": float(sum(result.loss_units)),
        }
    )
    for name in result.stat_names:
        values = [v.detach().flatten().double().cpu() for v in result.stats.get(name, [])]
        flat = torch.cat(values) if values else torch.zeros(0, dtype=torch.float64)  # [n] every recorded value
        totals.sums[f"stat:{name}:sum"], totals.sums[f"stat:{name}:count"] = flat.sum().item(), float(flat.numel())
        for extreme in result.stat_extremes.get(name, ()):
            if extreme == "max":
                totals.maxima[f"{name}_max"] = flat.max().item() if len(flat) else -float("inf")
            else:
                totals.minima[f"{name}_min"] = flat.min().item() if len(flat) else float("inf")
    totals.maxima.update(shared_columns(result))
    return totals


def shared_columns(result: UpdateResult) -> dict[str, float]:
    """The columns every rank computes alike: the shared micro-batch schedule's optimizer steps,
    the sharded loss scaler's decisions, and the norm of the gradient reduced over ranks."""
    out = {"optimizer_steps": float(result.optimizer_steps)}
    if result.grad_scale is not None:
        out["grad_scale"] = result.grad_scale
        out["skipped_steps"] = float(result.skipped_steps)
    if result.grad_norms:
        out["grad_norm"] = sum(result.grad_norms) / len(result.grad_norms)
        out["grad_norm_max"] = max(result.grad_norms)
    return out


def update_columns(totals: RankTotals, result: UpdateResult) -> dict[str, float]:
    """The update's metrics columns from `totals` (the job's, or on one process this rank's),
    named and ordered by `result`; a statistic no rank recorded, and the loss of a step that
    trained nothing, are left out."""
    sums, maxima = totals.sums, totals.maxima
    out = {
        "optimizer_steps": maxima["optimizer_steps"],
        "trained_fraction": sums["trained_units"] / max(sums["total_units"], 1.0),
    }
    out.update({name: maxima[name] for name in ("grad_scale", "skipped_steps") if name in maxima})
    if sums["loss:units"]:
        out["loss"] = sums["loss:sum"] / sums["loss:units"]
    out.update({name: maxima[name] for name in ("grad_norm", "grad_norm_max") if name in maxima})
    for name in result.stat_names:
        count = sums[f"stat:{name}:count"]
        if not count:
            continue
        out[name] = sums[f"stat:{name}:sum"] / count
        for extreme in result.stat_extremes.get(name, ()):
            column = f"{name}_{extreme}"
            out[column] = (maxima if extreme == "max" else totals.minima)[column]
    return out


def throughput_columns(generated: int, job: dict[str, float]) -> dict[str, float]:
    """The job's `generated` samples per second of rollout, and per second of the step's
    rollout, reward and train phases (the job's phase seconds, `step_columns`)."""
    step_seconds = job["time_rollout_s"] + job["time_reward_s"] + job["time_train_s"]
    return {
        "images_per_s": generated / max(job["time_rollout_s"], 1e-9),
        "step_images_per_s": generated / max(step_seconds, 1e-9),
    }


def step_columns(
    result: UpdateResult, phases: dict[str, float], ranks: distributed.RankInfo = distributed.RankInfo()
) -> dict[str, float]:
    """The job's update columns and phase columns (`phases`: this rank's seconds and peak
    memory), in one all-gather under torchrun. Every rank calls it once per step."""
    totals = update_totals(result)
    for name, value in phases.items():
        (totals.sums if name in SUMMED_PHASES else totals.maxima)[name] = value
    job = distributed.reduce_totals(totals, ranks)
    return {
        **update_columns(job, result),
        **{name: job.sums[name] if name in SUMMED_PHASES else job.maxima[name] for name in phases},
    }


def step_line(progress: str, row: dict[str, float]) -> str:
    """The console line of a step: where the run is, its headline numbers and the job's phase
    seconds (and peak GPU memory where it was measured)."""
    peak = f", peak GPU memory {row[MEMORY_COLUMN]:.2f} GiB" if MEMORY_COLUMN in row else ""
    return (
        f"{progress}: {console_summary(row)}  (rollout {row['time_rollout_s']:.1f}s, "
        f"reward {row['time_reward_s']:.1f}s, train {row['time_train_s']:.1f}s{peak})"
    )
