"""The run directory (`trainer.output_dir`): what a start may do with it, so no run is lost.

Where it fits: the first thing `Trainer.__init__` does, before any model or reward loads.
`decide_start` only reads the directory and decides (or raises `RunDirError` naming the
directory and the key to set); `StartDecision.apply` (rank 0 only) then removes what the
decision says must go, logging each path. `prune_checkpoints` runs after each `checkpoint-<step>`.

Rules:
- a fresh run (`trainer.resume_from` unset) needs a directory without run files
  (`metrics.csv`, `eval_metrics.csv`, `config.yaml`, `provenance.json`, `report.html`,
  `checkpoint-*`, `eval_epoch_*`);
  `trainer.overwrite=true` removes the old run's files first (other files are left alone),
  so two runs are never mixed in one directory;
- `trainer.resume_from=auto` continues from the newest complete checkpoint in the
  directory (by the step in its `trainer_state.json`), or starts fresh when there is none —
  replacing the files of a run that died before its first checkpoint, provided its
  `config.yaml` agrees on the training keys;
- a directory is a genalign run only if it holds our `config.yaml` (a mapping of config
  groups with a `trainer` section) or our `provenance.json` (a `launches` list) or a complete
  checkpoint: files with run names (`metrics.csv`, `report.html`, ...) in any other
  directory belong to someone else and are never removed without `trainer.overwrite=true`;
- a checkpoint directory that is present but cannot be used (a file missing or corrupt) is
  named in the log with the reason when `auto` passes over it;
- a run never moves backwards: a checkpoint past `trainer.num_steps` is an error, one at
  exactly `trainer.num_steps` means nothing is left to train, and a resume that would pass
  over newer checkpoints in the directory (and later overwrite them) is an error unless
  `trainer.overwrite=true`, which removes them;
- `trainer.resume_from=""` is an error, never a silent fresh run;
- `train.log`, `tensorboard/` and `wandb/` go with the run files of a genalign run (removed
  with them), never with files that are not ours;
- temp dirs left by a crash mid-save (`.checkpoint-N.tmp-PID`, `.old-`, `.del-`) and the
  `.<run file>.tmp-PID` of an atomic write are removed, in a genalign run only;
- a run's own names must not be symlinks (`train.log` -> elsewhere would append log lines to
  another file): the start is refused, so no write follows a link out of the directory.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from genalign.config.errors import ConfigError
from genalign.config.loader import config_to_dict
from genalign.config.safe_yaml import safe_load_unique
from genalign.config.schema import ExperimentConfig
from genalign.hub import is_hub_reference
from genalign.placement.launch import rerun_instruction
from genalign.runs.checkpoint import checkpoint_problems, checkpoint_step
from genalign.runs.hub_checkpoint import fetch_hub_checkpoint
from genalign.runs.resume import incompatible_keys

log = logging.getLogger(__name__)

RUN_FILES = ("metrics.csv", "eval_metrics.csv", "config.yaml", "provenance.json", "report.html")
RUN_LOGS = ("train.log", "tensorboard", "wandb")
"""The text log and tracker folders: removed with the run they belong to, but on their own
(a start that failed before its first step) they do not make a directory "hold a run"."""
CHECKPOINT_NAME = re.compile(r"checkpoint-(\d+|final)")
EVAL_DIR_NAME = re.compile(r"eval_epoch_(\d+)")
ATOMIC_FILES = ("config.yaml", "provenance.json", "report.html")
"""The run files written by `atomic.write_text_atomically` (temporary `.<name>.tmp-<pid>`)."""
STALE_TEMP_NAME = re.compile(
    r"\.(checkpoint-(\d+|final)\.(tmp|old|del)|(%s)\.tmp)-\d+|\.hub-upload-\d+-checkpoint-(\d+|final)"
    % "|".join(re.escape(name) for name in ATOMIC_FILES)
)
"""What `save_checkpoint` / `prune_checkpoints` leave beside a checkpoint while writing or
deleting it, `atomic.write_text_atomically` beside a run file, and `trainer.push_to_hub`'s
staging folder while it uploads (`export/hub_push.py`); present at start only after a crash
(resume already ignores them)."""


class RunDirError(ConfigError):
    """The run directory and the trainer.* keys disagree; raised before anything loads."""


@dataclass
class StartDecision:
    """The decision for this start: from which checkpoint (None = fresh) and what to remove."""

    output_dir: Path
    checkpoint: Path | None = None
    checkpoint_step: int = 0
    finished: bool = False
    """The checkpoint is already at trainer.num_steps: nothing is left to train."""
    remove: list[Path] = field(default_factory=list)

    def nothing_left(self) -> str:
        """What a `finished` start says: the checkpoint is at the last step."""
        return (
            f"{self.checkpoint} is at step {self.checkpoint_step} = trainer.num_steps: nothing left to train "
            "(raise trainer.num_steps to continue)"
        )

    def apply(self) -> None:
        """Remove what the decision listed (rank 0 only; other ranks wait at a barrier)."""
        for path in self.remove:
            log.info("run directory: removing %s", path)
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            elif path.exists() or path.is_symlink():
                path.unlink()


def _checkpoints(output_dir: Path) -> dict[Path, int | None]:
    """checkpoint-<step>/checkpoint-final dirs -> their step (None when incomplete)."""
    return {
        path: checkpoint_step(path)
        for path in sorted(output_dir.iterdir())
        if path.is_dir() and CHECKPOINT_NAME.fullmatch(path.name)
    }


def newest_checkpoint(output_dir: Path) -> tuple[Path, int] | None:
    """(path, step) of the newest complete checkpoint in `output_dir`, else None (for the
    line that says where a stopped run resumes)."""
    if not output_dir.is_dir():
        return None
    complete = [(step, path) for path, step in _checkpoints(output_dir).items() if step is not None]
    return (max(complete)[1], max(complete)[0]) if complete else None


def resume_hint(output_dir: Path, world_size: int, argv: list[str]) -> str:
    """Where and how to resume: the newest complete checkpoint in the run directory, and
    the command (under torchrun, the launch command rebuilt from this rank's arguments)."""
    rerun = rerun_instruction(world_size, argv)
    newest = newest_checkpoint(output_dir)
    if newest is None:
        return f"no checkpoint yet: to start the run again in {output_dir}, {rerun}"
    path, step = newest
    return f"to resume, {rerun} (it continues from {path} at step {step + 1})"


def is_genalign_run(output_dir: Path) -> bool:
    """Whether `output_dir` holds a genalign run: our config.yaml, our provenance.json or a
    complete checkpoint. Only then may a start remove run files without trainer.overwrite."""
    if not output_dir.is_dir():
        return False
    return (
        _our_config(output_dir / "config.yaml") is not None
        or _our_provenance(output_dir / "provenance.json")
        or any(step is not None for step in _checkpoints(output_dir).values())
    )


def _our_config(path: Path) -> dict | None:
    """The config dict in `path` when it is one genalign wrote (a mapping of our config groups
    with a `trainer` section), else None; never raises (read with the bounded YAML loader)."""
    if path.is_symlink() or not path.is_file():
        return None
    try:
        data = safe_load_unique(path.read_text(encoding="utf-8"))
    except (yaml.YAMLError, ValueError, OSError):
        return None
    groups = {f.name for f in dataclasses.fields(ExperimentConfig)}
    if isinstance(data, dict) and isinstance(data.get("trainer"), dict) and set(data) <= groups:
        return data
    return None


def _our_provenance(path: Path) -> bool:
    if path.is_symlink() or not path.is_file():
        return False
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, OSError):
        return False
    return isinstance(data, dict) and isinstance(data.get("launches"), list)


def _linked_run_names(output_dir: Path) -> list[Path]:
    """Symlinks among the names a run writes: a write through one would leave the directory."""
    if not output_dir.is_dir():
        return []
    return sorted(
        path
        for path in output_dir.iterdir()
        if path.is_symlink()
        and (
            path.name in RUN_FILES
            or path.name in RUN_LOGS
            or CHECKPOINT_NAME.fullmatch(path.name)
            or EVAL_DIR_NAME.fullmatch(path.name)
        )
    )


def _newest_usable(checkpoints: dict[Path, int | None]) -> tuple[Path, int] | None:
    """The newest checkpoint `auto` can resume from; every newer one it passes over (a file
    missing or corrupt: headers and JSON read, no tensor) is logged with the reason."""

    def skip(path: Path, problems: list[str]) -> None:
        why = "; ".join(problems) or f"trainer.resume_from=auto: {path}/trainer_state.json has no usable step"
        log.warning("%s; skipping %s", why, path.name)

    for path, step in checkpoints.items():
        if step is None:  # no readable step: never a candidate, always worth a line
            skip(path, checkpoint_problems(path, "trainer.resume_from=auto"))
    # newest by step; on a tie prefer checkpoint-<step> over checkpoint-final (same state)
    ranked = sorted(
        ((path, step) for path, step in checkpoints.items() if step is not None),
        key=lambda item: (item[1], item[0].name != "checkpoint-final"),
        reverse=True,
    )
    for path, step in ranked:
        problems = checkpoint_problems(path, "trainer.resume_from=auto")
        if not problems:
            return path, step
        skip(path, problems)
    return None


def run_files(output_dir: Path) -> list[Path]:
    """Files and dirs a run writes into `output_dir` (checkpoints, metrics, eval artefacts)."""
    if not output_dir.is_dir():
        return []
    return sorted(
        path
        for path in output_dir.iterdir()
        if path.name in RUN_FILES or CHECKPOINT_NAME.fullmatch(path.name) or EVAL_DIR_NAME.fullmatch(path.name)
    )


def with_run_logs(output_dir: Path, existing: list[Path]) -> list[Path]:
    """`existing` run files plus, when there are any, the logs and tracker folders beside them."""
    if not existing:
        return []
    return sorted(existing + [output_dir / name for name in RUN_LOGS if (output_dir / name).exists()])


def stale_temp_dirs(output_dir: Path) -> list[Path]:
    """Temporaries a crashed genalign write left (in a genalign run only: a dotfile in any
    other directory is not ours to remove)."""
    if not is_genalign_run(output_dir):
        return []
    return sorted(path for path in output_dir.iterdir() if STALE_TEMP_NAME.fullmatch(path.name))


def _newer_checkpoints(output_dir: Path, step: int) -> list[Path]:
    """Complete checkpoints in `output_dir` of a step after `step`: state a resume must not pass over."""
    if not output_dir.is_dir():
        return []
    return [path for path, saved in _checkpoints(output_dir).items() if saved is not None and saved > step]


def _later_eval_dirs(output_dir: Path, step: int) -> list[Path]:
    """eval_epoch_<n> with n > step: written by steps a resume redoes (like their metrics rows,
    which CSVSink cuts), so they are replaced, not kept beside the redone ones."""
    return [
        path
        for path in run_files(output_dir)
        if EVAL_DIR_NAME.fullmatch(path.name) and int(path.name.rsplit("_", 1)[1]) > step
    ]


def _foreign(output_dir: Path, existing: list[Path]) -> RunDirError:
    return RunDirError(
        [
            f"trainer.output_dir={output_dir} holds {_names(existing)} but is not a genalign run (no "
            "genalign config.yaml or provenance.json): choose another trainer.output_dir, or set "
            "trainer.overwrite=true to remove those files"
        ]
    )


def _names(paths: list[Path]) -> str:
    shown = ", ".join(path.name for path in paths[:6])
    return shown + (f" and {len(paths) - 6} more" if len(paths) > 6 else "")


def decide_start(cfg) -> StartDecision:
    """Decide how this run starts in `cfg.trainer.output_dir` (reads only; raises RunDirError)."""
    trainer = cfg.trainer
    output_dir = Path(trainer.output_dir)
    if output_dir.exists() and not output_dir.is_dir():
        raise RunDirError(
            [f"trainer.output_dir={output_dir} is a file, not a directory; choose another trainer.output_dir"]
        )
    linked = _linked_run_names(output_dir)
    if linked:
        raise RunDirError(
            [
                f"trainer.output_dir={output_dir}: {_names(linked)} is a symbolic link; a run writes "
                "only inside its own directory: remove the link or choose another trainer.output_dir"
            ]
        )
    start = StartDecision(output_dir, remove=stale_temp_dirs(output_dir))
    resume_from = trainer.resume_from
    if resume_from is not None and not str(resume_from).strip():
        raise RunDirError(
            [
                "trainer.resume_from is empty: leave it unset (null) for a fresh run, set "
                "trainer.resume_from=auto to continue the run in trainer.output_dir, or give a "
                "checkpoint directory"
            ]
        )
    if resume_from is None:
        existing = run_files(output_dir)
        if existing and not trainer.overwrite:
            if not is_genalign_run(output_dir):
                raise _foreign(output_dir, existing)
            raise RunDirError(
                [
                    f"trainer.output_dir={output_dir} already holds a run ({_names(existing)}); "
                    "continue it with trainer.resume_from=auto, replace it with trainer.overwrite=true, "
                    "or choose another trainer.output_dir"
                ]
            )
        start.remove += with_run_logs(output_dir, existing)
        return start
    if resume_from == "auto":
        return _decide_auto(cfg, start)
    checkpoint = fetch_hub_checkpoint(resume_from) if is_hub_reference(resume_from) else Path(resume_from)
    step = checkpoint_step(checkpoint)
    if step is None:
        return start  # not a complete checkpoint: load_checkpoint reports what is wrong with it
    return _decide_resume(cfg, start, checkpoint, step)


def _decide_auto(cfg, start: StartDecision) -> StartDecision:
    output_dir = start.output_dir
    usable = _newest_usable(_checkpoints(output_dir) if output_dir.is_dir() else {})
    if usable is not None:
        newest, step = usable
        log.info("trainer.resume_from=auto: continuing from %s (step %d)", newest, step)
        return _decide_resume(cfg, start, newest, step, auto=True)
    existing = run_files(output_dir)
    if existing and not cfg.trainer.overwrite and not is_genalign_run(output_dir):
        raise _foreign(output_dir, existing)
    saved = _our_config(output_dir / "config.yaml")
    if saved is not None:
        differing = incompatible_keys(saved, config_to_dict(cfg))
        if differing and not cfg.trainer.overwrite:
            raise RunDirError(
                [
                    f"trainer.resume_from=auto: {output_dir} has no complete checkpoint and holds a run "
                    f"with a different config ({'; '.join(differing[:3])}); choose another "
                    "trainer.output_dir or set trainer.overwrite=true to replace it"
                ]
            )
    log.info(
        "trainer.resume_from=auto: no complete checkpoint in %s; starting fresh%s",
        output_dir,
        f" (replacing {_names(existing)})" if existing else "",
    )
    start.remove += with_run_logs(output_dir, existing)
    return start


def _decide_resume(cfg, start: StartDecision, checkpoint: Path, step: int, auto: bool = False) -> StartDecision:
    """`auto`: newer checkpoints that auto passed over as unusable (logged) do not block the
    resume; the run replaces each when it saves that step again."""
    num_steps = cfg.trainer.num_steps
    if step > num_steps:
        raise RunDirError(
            [
                f"trainer.resume_from={checkpoint} is at step {step}, past trainer.num_steps={num_steps}; "
                f"a run never moves backwards: set trainer.num_steps above {step} to train further"
            ]
        )
    start.checkpoint, start.checkpoint_step = checkpoint, step
    if step == num_steps:
        start.finished = True
        return start
    newer = _newer_checkpoints(start.output_dir, step)
    if auto:
        newer = [path for path in newer if not checkpoint_problems(path)]
    if newer and not cfg.trainer.overwrite:
        raise RunDirError(
            [
                f"trainer.resume_from={checkpoint} (step {step}) would overwrite newer checkpoints in "
                f"{start.output_dir} ({_names(newer)}); continue from the newest with "
                "trainer.resume_from=auto, or set trainer.overwrite=true to discard them"
            ]
        )
    start.remove += sorted(newer + _later_eval_dirs(start.output_dir, step))
    return start


def prune_checkpoints(output_dir: Path, keep_last: int | None) -> list[Path]:
    """Delete all but the newest `keep_last` checkpoint-<step> dirs (never checkpoint-final);
    diffusers' `checkpoints_total_limit`. Each is renamed to a dot-name first, so a crash
    mid-delete leaves a temp dir that the next start removes, never a half checkpoint-<step>."""
    if keep_last is None:
        return []
    numbered = sorted(
        (int(path.name.split("-")[1]), path)
        for path in output_dir.iterdir()
        if path.is_dir() and CHECKPOINT_NAME.fullmatch(path.name) and path.name != "checkpoint-final"
    )
    removed = [path for _, path in numbered[:-keep_last]]
    for path in removed:
        doomed = path.parent / f".{path.name}.del-{os.getpid()}"
        path.rename(doomed)
        shutil.rmtree(doomed)
        log.info("trainer.keep_last=%d: removed %s", keep_last, path)
    return removed
