"""The command line as a user runs it (subprocesses, the installed entry points)."""

from __future__ import annotations

import os
import subprocess
import sys

import yaml

RECIPE = "experiment/diffusion/sd3_5/online_grpo_ocr"
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}


def run(*args: str, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, env=ENV, cwd=cwd, timeout=600)


def test_config_prints_the_resolved_recipe_without_loading_a_model():
    # --no-check-files: offline, the recipe's hub id is not cached here (test_bad_inputs checks that error)
    result = run(
        "-m",
        "genalign",
        "config",
        "--config",
        RECIPE,
        "--no-check-files",
        "trainer.output_dir=outputs/x",
        "rollout.n=4",
    )
    assert result.returncode == 0, result.stderr
    tree = yaml.safe_load(result.stdout)
    assert tree["model"]["path"] == "stabilityai/stable-diffusion-3.5-medium"
    assert tree["reward"]["components"] == {"ocr": 1.0}
    assert tree["rollout"]["n"] == 4 and tree["rollout"]["rollout_batch_size"] == 8
    assert tree["trainer"]["output_dir"] == "outputs/x"
    assert "torch" not in result.stderr.lower() or "warning" in result.stderr.lower()


def test_config_error_names_key_and_suggests():
    result = run("-m", "genalign", "config", "--config", RECIPE, "rollout.nn=4")
    assert result.returncode == 2
    assert "rollout.nn" in result.stderr and "did you mean" in result.stderr.lower()


def test_train_module_and_cli_accept_the_same_arguments(tiny_sd3_dir, tmp_path):
    overrides = [
        f"model.path={tiny_sd3_dir}",
        "model.device=cpu",
        "model.dtype=float32",
        "/base/distributed=local",
        "rollout.height=64",
        "rollout.width=64",
        "rollout.num_steps=2",
        "rollout.n=2",
        "rollout.rollout_batch_size=1",
        "rollout.sample_batch_size=2",
        "actor.gradient_accumulation_steps=1",
        "eval.num_steps=2",
        "eval.max_prompts=2",
        "trainer.num_steps=1",
        "trainer.save_every=0",
    ]
    for entry in (["-m", "genalign.train"], ["-m", "genalign", "train"]):
        out = tmp_path / entry[-1].replace(".", "_")
        result = run(*entry, "--config", RECIPE, *overrides, f"trainer.output_dir={out}")
        assert result.returncode == 0, result.stderr[-3000:]
        assert (out / "metrics.csv").exists() and (out / "checkpoint-final" / "trainable.safetensors").exists()
        assert "parity preflight" in result.stderr


def test_report_writes_the_page_and_refuses_a_dir_without_a_run(tmp_path):
    from support import make_run_dir

    run_dir = make_run_dir(tmp_path / "run", num_steps=4, eval_every=2)
    result = run("-m", "genalign", "report", str(run_dir))
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == str(run_dir / "report.html")
    assert 'id="status">finished · 4 steps' in (run_dir / "report.html").read_text()
    result = run("-m", "genalign", "report", str(tmp_path))  # tmp_path holds only the run's folder
    assert result.returncode == 2
    assert "holds no run" in result.stderr and "Traceback" not in result.stderr


def test_version_and_top_level_help_list_every_command():
    from genalign import __version__, cli

    result = run("-m", "genalign", "--version")
    assert result.returncode == 0 and result.stdout.strip() == f"genalign {__version__}"
    result = run("-m", "genalign", "--help")
    assert result.returncode == 0
    for command in cli.COMMANDS:
        assert f"\n  {command} " in result.stdout and cli.SUMMARIES[command] in result.stdout, command
    assert "--version" in result.stdout
    bad = run("-m", "genalign", "trian")
    assert bad.returncode == 2 and bad.stderr.startswith("genalign: error: unknown command 'trian'")


def test_train_help_lists_the_recipes_and_config_groups(capsys):
    import pytest

    from genalign import cli
    from genalign.config.catalog import groups, recipes

    with pytest.raises(SystemExit) as exit_code:
        cli.main(["train", "--help"])
    assert exit_code.value.code == 0
    text = capsys.readouterr().out
    assert recipes() and all(name in text for name in recipes())
    assert "experiment/toy/shapes_grpo" in text and "The default recipe" in text  # with its description
    for group, options in groups(include_recipes=False).items():
        assert f"  {group} " in text and all(option in text for option in options), group
    assert "/base/distributed" in text and "ray_rollout_cross_node" in text
    assert "+key=value" in text and "${oc.env:VAR}" in text
