"""Atomic writes of small text files in a run directory (config.yaml, provenance.json,
report.html): a temporary `.<name>.tmp-<pid>` beside the file, renamed over it. A crash or a
full disk leaves the old file or none, never half of one; a temporary left by a kill is
removed by the next run's start (`runs.run_dir.STALE_TEMP_NAME`)."""

from __future__ import annotations

import os
from pathlib import Path

from genalign.config.errors import WriteError, disk_full_is_user_error


def write_text_atomically(path: Path | str, text: str) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    temporary.unlink(missing_ok=True)  # a link planted under our temporary's name is removed, never followed
    try:
        with disk_full_is_user_error(path):
            temporary.write_text(text, encoding="utf-8")
    except WriteError:
        temporary.unlink(missing_ok=True)
        raise
    os.replace(temporary, path)
    return path
