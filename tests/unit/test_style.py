"""The style the tree is held to: `ruff check` (import order, pyflakes, pycodestyle, 120
columns) and `ruff format --check` pass, with pyproject.toml's [tool.ruff] settings. .ci/run
runs the same commands before the suite; this test makes a plain `pytest` run them too."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def ruff() -> str:
    """The ruff beside this interpreter (the dev extra installs it), else one on PATH."""
    beside = Path(sys.executable).with_name("ruff")
    found = str(beside) if beside.is_file() else shutil.which("ruff")
    if found is None:
        pytest.skip("ruff is not installed (pip install -e '.[dev]' installs it)")
    return found


@pytest.mark.parametrize("command", [["check"], ["format", "--check"]], ids=["lint", "format"])
def test_the_tree_passes_ruff(command):
    run = subprocess.run([ruff(), *command], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]


def test_ruff_would_catch_a_long_line_and_unsorted_imports(tmp_path):
    """The check is not vacuous: the same settings refuse a file that breaks them."""
    bad = tmp_path / "bad.py"
    bad.write_text("import sys\nimport os\n\nx = '" + "y" * 130 + "'\nprint(os, sys, x)\n")
    run = subprocess.run(
        [ruff(), "check", "--config", str(ROOT / "pyproject.toml"), str(bad)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 1 and "E501" in run.stdout and "I001" in run.stdout, run.stdout
