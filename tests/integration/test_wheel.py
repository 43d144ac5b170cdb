"""Installed, not cloned: genalign built as a wheel and installed into a fresh environment runs.

The wheel is built from the package as it is here (`pip wheel`, no build isolation, offline)
and installed with `--no-deps` into a new virtual environment that reaches the installed
dependencies (torch, diffusers, ...) through a `.pth` line naming this environment's
site-packages. A path line adds the folder only: its own `.pth` files, among them the
editable install's finder, are not run, so the only genalign the new environment can import is
the wheel's. Every command runs from an empty temporary directory, so nothing of the checkout
(genalign/, its prompt sets) is on the path or under the working directory.
"""

from __future__ import annotations

import os
import shutil
import site
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
from support import read_rows

import genalign

CHECKOUT = Path(genalign.__file__).resolve().parents[1]
CHECK_RECIPES = """
import sys
from genalign.config.catalog import recipe_paths
from genalign.config.loader import compose_config
from genalign.data.prompts import resolve_data_path

for recipe in recipe_paths():
    data = compose_config(recipe).data
    for key in ("manifest", "eval_manifest", "preference_manifest"):
        if getattr(data, key):
            print(recipe, f"data.{key}", resolve_data_path(getattr(data, key), f"data.{key}"))
"""


def run(command: list[str], cwd: Path, timeout: float) -> str:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "GENALIGN_DATA_ROOT")}
    result = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, f"{command}:\n{result.stdout[-2000:]}\n{result.stderr[-4000:]}"
    return result.stdout


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """The bin/ folder of a fresh virtual environment with the wheel of this checkout installed."""
    root = tmp_path_factory.mktemp("wheel")
    source = root / "source"  # a copy: building in the checkout would leave build/ and egg-info there
    shutil.copytree(CHECKOUT / "genalign", source / "genalign", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(CHECKOUT / name, source / name)
    run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "--quiet",
            "--wheel-dir",
            str(root / "dist"),
            str(source),
        ],
        cwd=root,
        timeout=300,
    )
    [wheel] = (root / "dist").glob("genalign-*.whl")

    env_dir = root / "env"
    run([sys.executable, "-m", "venv", "--without-pip", str(env_dir)], cwd=root, timeout=120)
    python = env_dir / "bin" / "python"
    env_site = Path(
        run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"], root, 60).strip()
    )
    # the dependencies (and pip) of this environment, without its editable genalign
    (env_site / "dependencies.pth").write_text(
        "\n".join([sysconfig.get_path("purelib"), *site.getsitepackages()]) + "\n"
    )
    run([str(python), "-m", "pip", "install", "--no-deps", "--no-index", "--quiet", str(wheel)], cwd=root, timeout=300)
    return env_dir / "bin"


def test_the_installed_package_is_the_wheel_and_ships_the_prompt_sets(installed, tmp_path):
    where = run([str(installed / "python"), "-c", "import genalign; print(genalign.__file__)"], tmp_path, 120)
    package = Path(where.strip()).parent
    assert package.parent.parent.parent.parent == installed.parent  # <env>/lib/pythonX.Y/site-packages/genalign
    # every shipped recipe's prompt sets resolve inside the installed package (never
    # site-packages/datasets/, where Hugging Face's `datasets` library lives)
    lines = run([str(installed / "python"), "-c", CHECK_RECIPES], tmp_path, 300).splitlines()
    assert any(line.startswith("experiment/toy/shapes_grpo data.manifest ") for line in lines)
    assert any(" data.preference_manifest " in line for line in lines)  # the offline DPO recipe's pairs
    for line in lines:
        resolved = Path(line.split(" ", 2)[2])
        assert resolved.is_relative_to(package / "datasets"), line


def test_the_default_recipe_trains_from_another_directory(installed, tmp_path):
    """`genalign train` as a user runs it after `pip install genalign`: the default recipe,
    2 steps and one small evaluation, from a directory holding nothing of genalign."""
    run(
        [
            str(installed / "genalign"),
            "train",
            "trainer.num_steps=2",
            "eval.every=2",
            "eval.max_prompts=2",
            "eval.samples_per_prompt=2",
            "trainer.progress_bar=false",
        ],
        tmp_path,
        600,
    )
    out = tmp_path / "outputs" / "toy_shapes_grpo"
    assert [row["step"] for row in read_rows(out / "metrics.csv")] == ["1", "2"]
    assert [row["step"] for row in read_rows(out / "eval_metrics.csv")] == ["0", "2"]
    assert (out / "checkpoint-final" / "trainable.safetensors").is_file() and (out / "report.html").is_file()
