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
"""

from __future__ import annotations

import shlex

# overrides that must not be repeated by the resume command (auto decides where to start;
# trainer.overwrite=true would discard the run being resumed)
_START_KEYS = ("trainer.resume_from=", "trainer.overwrite=")


def resume_command(nproc: int, config: str | None, overrides: list[str]) -> str:
    """The `genalign train` command that continues this run from its newest checkpoint."""
    kept = [o for o in overrides if not o.startswith(_START_KEYS)]
    config_args = ["--config", config] if config else []
    return shlex.join(["genalign", "train", f"--nproc-per-node={nproc}", *config_args, *kept,
                       "trainer.resume_from=auto"])


def failure_report(error, nproc: int, config: str | None, overrides: list[str]) -> str:
    """One message from torchrun's `ChildFailedError`: which rank failed first, how, and the
    resume command."""
    rank, failure = error.get_first_failure()
    if failure.exitcode < 0:
        how = f"was killed by {failure.signal_name()}"
    else:
        how = f"exited with code {failure.exitcode} (its error is above)"
    return (f"genalign: error: rank {rank} (local rank {failure.local_rank}, pid {failure.pid}) {how} at "
            f"{failure.timestamp_isoformat()}; torchrun stopped the other ranks and ended the job.\n"
            f"hint: continue the run from its newest complete checkpoint with:\n  "
            f"{resume_command(nproc, config, overrides)}")


def launch_ranks(nproc: int, config: str | None, overrides: list[str]) -> int:
    """Run `genalign.train` on `nproc` local ranks under torchrun's agent; 0 when every rank
    finished, 1 (after the report on stderr) when one failed."""
    import sys

    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import parse_args, run

    config_args = ["--config", config] if config else []
    args = parse_args(["--standalone", f"--nproc-per-node={nproc}", "-m", "genalign.train", *config_args,
                       *overrides])
    try:
        run(args)
    except ChildFailedError as error:
        print(failure_report(error, nproc, config, overrides), file=sys.stderr)
        return 1
    return 0
