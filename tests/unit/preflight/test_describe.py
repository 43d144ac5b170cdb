"""`genalign config --describe [PREFIX]`: every key with type, default, allowed values and meaning."""

from __future__ import annotations

import dataclasses

import pytest

from genalign.cli import main
from genalign.config.schema import ExperimentConfig
from genalign.preflight.describe import KeyHelp, describe, describe_keys, field_docs


def test_every_config_key_has_a_docstring():
    keys = describe_keys()
    assert len(keys) > 140
    undocumented = [k.key for k in keys if not k.doc.strip()]
    assert undocumented == [], f"add a docstring under each field: {undocumented}"


def test_keys_are_the_leaves_of_the_config_tree():
    def leaves(node, prefix=""):
        for f in dataclasses.fields(node):
            value = getattr(node, f.name)
            if dataclasses.is_dataclass(value):
                yield from leaves(value, f"{prefix}{f.name}.")
            else:
                yield f"{prefix}{f.name}"

    assert [k.key for k in describe_keys()] == list(leaves(ExperimentConfig()))


def test_type_default_choices_and_summary():
    keys = {k.key: k for k in describe_keys()}
    mode = keys["trainer.wandb.mode"]
    assert (mode.type, mode.default, mode.choices) == ("str | None", None, ("offline", "online", "disabled"))
    assert (
        mode.summary == "null: $WANDB_MODE, else `online` when you are logged in to W&B (WANDB_API_KEY, or the "
        "netrc entry `wandb login` writes), else `offline` (said once in the log)."
    )
    assert {"sd3", "flux", "wan", "cosmos", "toy"} <= set(keys["model.family"].choices)
    assert "grpo" in keys["algorithm.name"].choices
    assert keys["actor.betas"].default == [0.9, 0.999] and keys["actor.betas"].type == "list[float]"
    assert keys["model.dtype"].choices == ("float32", "float16", "bfloat16")


def test_summary_is_the_first_sentence():
    item = KeyHelp("k", "int", 1, (), "First part. Second\npart.\n\nMore.")
    assert item.summary == "First part."


def test_field_docs_read_the_string_under_each_field():
    @dataclasses.dataclass
    class Example:
        a: int = 1
        """About a."""
        b: int = 2
        c: int = 3
        """About c,
        two lines."""

    assert field_docs(Example) == {"a": "About a.", "c": "About c,\ntwo lines."}


def test_cli_prints_the_keys_under_a_prefix(capsys):
    assert main(["config", "--describe", "trainer.wandb"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0] == "trainer.wandb.project  (str | None, default null)"
    assert '    W&B project; null: $WANDB_PROJECT, else "genalign".' in out
    assert "trainer.wandb.mode  (str | None, default null; one of: offline, online, disabled)" in out
    assert "trainer.seed" not in out


def test_cli_describes_every_key_without_a_prefix(capsys):
    assert main(["config", "--describe"]) == 0
    out = capsys.readouterr().out
    assert len([line for line in out.splitlines() if not line.startswith(" ")]) == len(describe_keys())
    assert "(undocumented)" not in out


def test_an_unknown_prefix_is_a_one_line_error(capsys):
    assert main(["config", "--describe", "trainr"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(
        "genalign: error: --describe trainr: no config key is or starts with 'trainr'; "
        "top-level groups: actor, algorithm, data, distributed, eval, model, recipe, reward, "
        "rollout, trainer"
    )
    with pytest.raises(ValueError):
        describe("model.nope")
