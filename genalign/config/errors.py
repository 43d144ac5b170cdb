"""User errors: mistakes in a config, a file or a command line, as opposed to bugs.

Where it fits: `load_config` / `config_from_dict` / `StepSizes.from_config` raise `ConfigError`;
manifests (`ManifestError`), checkpoints (`CheckpointError`) and resume (`ResumeError`)
derive from the same `UserError`. The CLI's one top-level handler prints a `UserError` as one
readable line (plus an optional `hint:` line) and exits 2; any other exception is a bug and
keeps its traceback. One `ConfigError` carries all problems so a user fixes a recipe in one
pass instead of one crash per typo.
"""

from __future__ import annotations

import errno
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator


class UserError(Exception):
    """A mistake the user can fix: the message says what, where, and how. `hint` is an
    optional second line (e.g. the command that would fix it)."""

    def __init__(self, message: str, hint: str | None = None):
        super().__init__(message)
        self.hint = hint


class ConfigError(UserError, ValueError):
    """A config that cannot run. `problems` holds one self-contained message per problem
    (key, where it was set, how to fix); `str(err)` lists them, one per line."""

    def __init__(self, problems: list[str], hint: str | None = None):
        self.problems = list(problems)
        super().__init__("\n".join(f"- {p}" for p in self.problems), hint)


DISK_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS})
"""A write that failed for want of space (or a quota, a file-size limit, a read-only mount):
the user's to fix, not a bug."""
DISK_FULL_HINT = (
    "free disk space or choose another trainer.output_dir, then rerun the same command with "
    "trainer.resume_from=auto: it continues from the last complete checkpoint (they are written atomically)"
)


class WriteError(UserError, OSError):
    """A run file could not be written (disk full, quota, read-only): names the file."""


def refuse_symlink(path: Path | str) -> None:
    """Raise a one-line `WriteError` when the file `path` is a symbolic link: a run writes only
    inside its own directory, and a link planted there (`train.log`, a contact sheet in
    `eval_epoch_*`, a CSV) would send the write to a file elsewhere. Folders are not checked
    here (an output_dir reached through a link is the user's choice; the run's own folder
    names are refused as links when the run starts, `runs.run_dir`)."""
    path = Path(path)
    if path.is_symlink():
        raise WriteError(
            f"refusing to write {path}: it is a symbolic link (to {os.readlink(path)}); a run writes "
            "only inside its own directory: remove the link"
        )


@contextmanager
def disk_full_is_user_error(path: Path | str) -> Iterator[None]:
    """Turn a disk-full OSError inside the block into a one-line `WriteError` naming `path`.
    Every run-file writer enters this block, so it is also where a symlinked `path` is refused
    (`refuse_symlink`)."""
    refuse_symlink(path)
    try:
        yield
    except OSError as exc:
        if exc.errno not in DISK_FULL_ERRNOS or isinstance(exc, UserError):
            raise
        raise WriteError(f"writing {path} failed: {exc.strerror or exc}", hint=DISK_FULL_HINT) from exc
