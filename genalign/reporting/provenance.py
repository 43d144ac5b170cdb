"""Provenance: what produced a run — command line, package versions, git commit, machine.

Where it fits: `Trainer.train` (rank 0) calls `record_start` (config.yaml, then
`record_launch`) once per launch, before the first step, so `provenance.json` in the run
directory says how every launch of the run was started (a resumed run appends a launch; a
fresh or overwritten run starts the list). The report reads it; a run directory without it (older
runs) simply has no provenance section.
"""

from __future__ import annotations

import json
import os
import platform
import shlex
import socket
import subprocess
import sys
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path

import genalign.version
from genalign.atomic import write_text_atomically
from genalign.config.errors import UserError

PROVENANCE_FILE = "provenance.json"
PACKAGES = (
    "genalign",
    "torch",
    "diffusers",
    "transformers",
    "peft",
    "accelerate",
    "safetensors",
    "numpy",
    "pillow",
    "ray",
    "matplotlib",
)
"""Distributions whose installed versions are recorded (the ones that change numbers)."""
GIT_TIMEOUT_S = 10.0


class ProvenanceError(UserError, ValueError):
    """provenance.json exists but cannot be read."""


def package_versions(names: tuple[str, ...] = PACKAGES) -> dict[str, str | None]:
    """Installed version of each distribution; None when it is not installed."""
    versions: dict[str, str | None] = {}
    for name in names:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def git_state(directory: Path) -> dict[str, object] | None:
    """{"commit", "dirty", "root"} of the git checkout holding `directory`; None when it is
    not in one or git is not installed (a pip-installed package has no commit)."""

    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(
                ["git", "-C", str(directory), *args], capture_output=True, text=True, timeout=GIT_TIMEOUT_S, check=False
            )
        except (OSError, subprocess.TimeoutExpired):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    if commit is None:
        return None
    changes = git("status", "--porcelain", "--untracked-files=no")
    return {
        "commit": commit,
        "dirty": bool(changes) if changes is not None else None,
        "root": git("rev-parse", "--show-toplevel"),
    }


def launch_record(start_step: int, argv: list[str] | None = None) -> dict[str, object]:
    """One launch: when, how (command line, cwd), with what (versions, commit, devices)."""
    import torch

    argv = list(sys.argv if argv is None else argv)
    devices = (
        [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())] if torch.cuda.is_available() else []
    )
    return {
        "started_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "start_step": start_step,
        "command": shlex.join(argv),
        "argv": argv,
        "cwd": os.getcwd(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "hostname": socket.gethostname(),
        "cuda": torch.version.cuda,
        "devices": devices,
        "packages": package_versions(),
        "git": git_state(Path(genalign.version.__file__).resolve().parent),
    }


def read_provenance(run_dir: Path) -> dict | None:
    """The run's provenance, or None when it has no provenance.json (runs before it existed)."""
    path = Path(run_dir) / PROVENANCE_FILE
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ProvenanceError(f"{path} is not valid JSON ({exc}); delete it or restore it") from exc
    if not isinstance(data, dict) or not isinstance(data.get("launches"), list):
        raise ProvenanceError(f"{path} has no 'launches' list; delete it or restore it")
    data["launches"] = [launch for launch in data["launches"] if isinstance(launch, dict)]  # not a launch: not ours
    return data


def record_start(run_dir: Path, start_step: int, config_yaml: str) -> None:
    """A launch's files in the run directory: the resolved config as `config.yaml` (what the
    run trains with, rewritten on resume) and the launch appended to `provenance.json`."""
    Path(run_dir).mkdir(parents=True, exist_ok=True)
    write_text_atomically(Path(run_dir) / "config.yaml", config_yaml)
    record_launch(run_dir, start_step)


def record_launch(run_dir: Path, start_step: int, argv: list[str] | None = None) -> Path:
    """Append this launch to `run_dir/provenance.json` (a fresh run, start_step 1, starts the
    list), written atomically: a temporary file renamed over the old one."""
    path = Path(run_dir) / PROVENANCE_FILE
    previous = read_provenance(run_dir) if start_step > 1 else None
    launches = previous["launches"] if previous else []
    launches.append(launch_record(start_step, argv))
    return write_text_atomically(path, json.dumps({"launches": launches}, indent=2) + "\n")
