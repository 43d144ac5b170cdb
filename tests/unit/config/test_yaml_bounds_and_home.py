"""Bounded YAML (`safe_load_unique`) and `~` expanded once, when a config is built."""

from __future__ import annotations

import os

import pytest
import yaml

from genalign.config.loader import config_from_dict, config_to_dict
from genalign.config.safe_yaml import MAX_YAML_NODES, YAMLTooLarge, safe_load_unique
from genalign.preflight.load import load_config


def test_a_few_aliases_load_and_what_safe_dump_writes_round_trips():
    shared = ["to_q", "to_k"]
    text = yaml.safe_dump({"a": shared, "b": shared})  # PyYAML writes an anchor and an alias here
    assert "&id" in text and safe_load_unique(text) == {"a": shared, "b": shared}


def test_nested_aliases_are_refused_before_they_expand():
    levels = ["a: &a [x, x, x, x, x, x, x, x, x, x]"] + [
        f"{chr(98 + i)}: &{chr(98 + i)} [" + ", ".join([f"*{chr(97 + i)}"] * 10) + "]" for i in range(8)
    ]
    with pytest.raises(YAMLTooLarge, match=f"more than {MAX_YAML_NODES} values"):
        safe_load_unique("\n".join(levels))
    assert len(safe_load_unique("\n".join(levels[:4]))["d"]) == 10  # 10^4 values: fine


def test_recursive_deep_and_huge_documents_are_refused():
    with pytest.raises(YAMLTooLarge, match="contains it"):
        safe_load_unique("a: &a [1, *a]")
    with pytest.raises(YAMLTooLarge, match="nested too deeply"):
        safe_load_unique("[" * 5000 + "]" * 5000)
    with pytest.raises(YAMLTooLarge, match="characters long"):
        safe_load_unique("a: " + "x" * 1_000_001)


def test_home_is_expanded_in_every_path_key_once():
    home = os.path.expanduser("~")
    cfg = load_config(None, ["trainer.output_dir=~/genalign_run", "data.manifest=~/prompts.txt"])
    assert cfg.trainer.output_dir == f"{home}/genalign_run" and cfg.data.manifest == f"{home}/prompts.txt"
    saved = config_to_dict(cfg)
    saved["model"]["path"] = "~/models/toy"
    assert config_from_dict(saved).model.path == f"{home}/models/toy"  # a checkpoint's config too
    assert load_config(None, ["trainer.resume_from=auto"]).trainer.resume_from == "auto"
