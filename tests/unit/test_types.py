"""The type check of the contracts: mypy, strict on the files pyproject.toml's [tool.mypy] names
(the Protocols of models/base.py, rollout/engine.py, algorithms/base.py, rewards/base.py and the
generic code that calls them), passes. .ci/run runs the same command before the suite; this test
makes a plain `pytest` run it too."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def mypy_command() -> list[str]:
    """mypy of this interpreter's environment (the dev extra installs it)."""
    pytest.importorskip("mypy", reason="mypy is not installed (pip install -e '.[dev]' installs it)")
    return [sys.executable, "-m", "mypy"]


def test_the_checked_files_exist_and_hold_the_protocols():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["mypy"]
    files = config["files"]
    assert config["strict"] is True
    assert all((ROOT / name).is_file() for name in files), [name for name in files if not (ROOT / name).is_file()]
    for contract in (
        "genalign/models/base.py",
        "genalign/rollout/engine.py",
        "genalign/algorithms/base.py",
        "genalign/rewards/base.py",
    ):
        assert contract in files


def test_mypy_passes_on_the_contracts():
    command = mypy_command()
    # the configured files and settings come from pyproject.toml; the cache under the checkout
    # (.mypy_cache, shared with .ci/run) makes a second run take seconds
    finished = subprocess.run(
        [*command, "--no-color-output", "--no-error-summary"], cwd=ROOT, capture_output=True, text=True, timeout=900
    )
    assert finished.returncode == 0, finished.stdout[-6000:] + finished.stderr[-2000:]


def test_mypy_would_catch_a_call_outside_the_contract(tmp_path):
    """The check can fail: a caller using a member the Protocol lacks is an error."""
    command = mypy_command()
    probe = tmp_path / "probe.py"
    probe.write_text(
        "from genalign.rollout.engine import RolloutEngine\n\n\n"
        "def refresh(engine: RolloutEngine) -> None:\n    engine.reload_weights()\n",
        encoding="utf-8",
    )
    finished = subprocess.run(
        [
            *command,
            "--no-color-output",
            "--strict",
            "--follow-imports=silent",
            "--cache-dir",
            str(ROOT / ".mypy_cache"),
            str(probe),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert finished.returncode == 1, finished.stdout[-4000:]
    assert '"RolloutEngine" has no attribute "reload_weights"' in finished.stdout
