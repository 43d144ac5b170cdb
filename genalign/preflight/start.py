"""The checks of one start that need no model: run by `Trainer.__init__` before anything loads.

Where it fits: after `load_config` (which checked the keys and the files) and the run
directory's decision (`runs/run_dir.py:decide_start`), before the process group, the model or
a reward is built. What it refuses is a one-line `UserError`, so a wrong resume, a plan over
the GPU or an accumulation the ranks cannot share costs seconds, not a model load:
- a start with nothing left to train (`Trainer.for_config` returns None for it instead);
- a checkpoint to resume from that cannot be read, or was written with a config that differs
  under the keys a resume may not change (`runs/resume.py:RESUME_KEYS`);
- the memory plan over `distributed.resources.gpu_memory_fraction` of the GPU, or a model it
  cannot describe while there is a GPU to check against (`memory_plan.py:check_memory`);
- `actor.gradient_accumulation_steps` that the job's ranks cannot share evenly.
"""

from __future__ import annotations

from typing import Callable

from genalign.config.loader import config_to_dict
from genalign.config.schema import ExperimentConfig
from genalign.preflight.memory_plan import check_memory
from genalign.preflight.step_sizes import per_rank_accumulation
from genalign.runs.checkpoint import CheckpointState, load_checkpoint
from genalign.runs.resume import ResumeError, incompatible_keys
from genalign.runs.run_dir import StartDecision


def check_start(
    cfg: ExperimentConfig, start: StartDecision, world_size: int, report: Callable[[str], None]
) -> CheckpointState | None:
    """Refuse what this start cannot do; the checkpoint to resume from, loaded (None when the
    run starts fresh). `world_size`: the job's ranks (torchrun's WORLD_SIZE); `report` is
    handed the memory plan's text (rank 0 logs it)."""
    if start.finished:
        raise ResumeError(start.nothing_left())
    checkpoint = load_checkpoint(start.checkpoint) if start.checkpoint else None
    if checkpoint is not None:
        differing = incompatible_keys(checkpoint.config, config_to_dict(cfg))
        if differing:
            raise ResumeError(
                f"trainer.resume_from={checkpoint.path}: the checkpoint was written with a "
                "different config:\n  " + "\n  ".join(differing)
            )
    check_memory(cfg, report)  # a plan over the GPU, or a model it cannot describe, is a config error
    # the ranks share each optimizer step's micro-batches (one process unless torchrun trains)
    per_rank_accumulation(
        cfg.actor.gradient_accumulation_steps, 1 if cfg.distributed.training.strategy == "none" else world_size
    )
    return checkpoint
