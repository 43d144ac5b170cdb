"""`genalign train --nproc-per-node N`: torchrun on this node, with a failed rank reported.

Where it fits: the command line, before any rank exists. It runs torchrun's own launcher
(`torch.distributed.run`, standalone rendezvous) with `-m genalign.train ARGS`, so the
ranks, the elastic agent and its failure handling are torchrun's: when a rank dies (killed,
out of memory, an exception) the agent stops the others at once and the job fails. This
module only turns torchrun's `ChildFailedError` into one message that names the rank that
failed first and the command that continues the run from its newest complete checkpoint
(`trainer.resume_from=auto`). A rank that hangs instead of dying is bounded by
`distributed.training.timeout_s` (the process-group timeout) and reported the same way.
Multi-node jobs launch `torchrun` themselves (its report names the rank; resume alike).

A run stopped by a signal says how to resume in one line from rank 0 (`rerun_instruction`):
the same command for one process, and for ranks the launch command itself, rebuilt from the
rank's arguments: `genalign train --nproc-per-node N ...` for ranks this module started,
`torchrun --standalone --nproc-per-node N -m genalign.train ...` for a bare one-node torchrun.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Mapping

# overrides that must not be repeated by the resume command (auto decides where to start;
# trainer.overwrite=true would discard the run being resumed)
_START_KEYS = ("trainer.resume_from=", "trainer.overwrite=")
LAUNCHER_ENV = "GENALIGN_NPROC_PER_NODE"
"""Set for the ranks `launch_ranks` starts: their resume line names `genalign train --nproc-per-node`."""


def _resume_args(args: list[str]) -> list[str]:
    return [*(a for a in args if not a.startswith(_START_KEYS)), "trainer.resume_from=auto"]


def resume_command(nproc: int, config: str | None, overrides: list[str]) -> str:
    """The `genalign train` command that continues this run from its newest checkpoint."""
    config_args = ["--config", config] if config else []
    return shlex.join(["genalign", "train", f"--nproc-per-node={nproc}", *_resume_args([*config_args, *overrides])])


def rerun_instruction(world_size: int, argv: list[str], environ: Mapping[str, str] = os.environ) -> str:
    """How to start this run again with trainer.resume_from=auto, as the resume line says it.
    `argv`: this process's `sys.argv` (under torchrun, `genalign/train.py` and the run's
    arguments); `environ`: torchrun's LOCAL_WORLD_SIZE and `LAUNCHER_ENV`."""
    if world_size <= 1:
        return "rerun the same command with trainer.resume_from=auto"
    run_args = _resume_args(argv[1:])
    if environ.get(LAUNCHER_ENV):
        return f"run `{shlex.join(['genalign', 'train', f'--nproc-per-node={environ[LAUNCHER_ENV]}', *run_args])}`"
    per_node = int(environ.get("LOCAL_WORLD_SIZE", world_size))
    if per_node == world_size:  # one node: a standalone rendezvous needs no address or port
        torchrun = ["torchrun", "--standalone", f"--nproc-per-node={per_node}", "-m", "genalign.train"]
        return f"run `{shlex.join([*torchrun, *run_args])}`"
    return (
        f"rerun the same torchrun command on each of the {world_size // per_node} nodes with "
        f"`-m {shlex.join(['genalign.train', *run_args])}`"
    )


def failure_report(error, nproc: int, config: str | None, overrides: list[str]) -> str:
    """One message from torchrun's `ChildFailedError`: which rank failed first, how, and the
    resume command."""
    rank, failure = error.get_first_failure()
    if failure.exitcode < 0:
        how = f"was killed by {failure.signal_name()}"
    else:
        how = f"exited with code {failure.exitcode} (its error is above)"
    return (
        f"genalign: error: rank {rank} (local rank {failure.local_rank}, pid {failure.pid}) {how} at "
        f"{failure.timestamp_isoformat()}; torchrun stopped the other ranks and ended the job.\n"
        f"hint: continue the run from its newest complete checkpoint with:\n  "
        f"{resume_command(nproc, config, overrides)}"
    )


def launch_ranks(nproc: int, config: str | None, overrides: list[str]) -> int:
    """Run `genalign.train` on `nproc` local ranks under torchrun's agent; 0 when every rank
    finished, 1 (after the report on stderr) when one failed."""
    import sys

    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import parse_args, run

    config_args = ["--config", config] if config else []
    args = parse_args(["--standalone", f"--nproc-per-node={nproc}", "-m", "genalign.train", *config_args, *overrides])
    os.environ[LAUNCHER_ENV] = str(nproc)  # the ranks' resume line names this command
    try:
        run(args)
    except ChildFailedError as error:
        print(failure_report(error, nproc, config, overrides), file=sys.stderr)
        return 1
    except SignalException as stop:  # SIGTERM/SIGINT here: torchrun passed it on to the ranks, whose
        return 128 + int(stop.sigval)  # rank 0 said how to resume; no launcher traceback after it
    return 0
