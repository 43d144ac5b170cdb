"""An algorithm from a user's module (`tests/user_algorithms.py`), named by its dotted path and
allowed through its own algorithm.allow_import (as a user's reward is through
reward.allow_import): checked at config time by its own
`config_problems`, then trained on the toy model through the real trainer. Nothing in the
package is registered or patched."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
from support import read_rows

from genalign.config.errors import ConfigError
from genalign.preflight.load import load_config
from genalign.preflight.stored_config import config_from_checkpoint, split_allow_overrides
from genalign.training.trainer import Trainer

USER = "user_algorithms:SignGRPO"


def tiny(out, *extra: str) -> list[str]:
    return [
        "rollout.num_steps=4",
        "rollout.n=2",
        "rollout.rollout_batch_size=2",
        "rollout.sample_batch_size=4",
        "actor.gradient_accumulation_steps=1",
        "algorithm.timestep_fraction=0.5",
        "eval.num_steps=2",
        "eval.max_prompts=2",
        "eval.samples_per_prompt=2",
        "eval.batch_size=4",
        "eval.every=0",
        "trainer.num_steps=2",
        "trainer.save_every=0",
        f"trainer.output_dir={out}",
        "trainer.progress_bar=false",
        # the shape reward is 0 for every blob of so short a run; compressibility varies
        "reward.components.toy_shape=0.0",
        "reward.components.jpeg_compressibility=1.0",
        *extra,
    ]


def config_error(*overrides: str) -> str:
    with pytest.raises(ConfigError) as error:
        load_config("experiment/toy/shapes_grpo", list(overrides))
    return str(error.value)


def test_a_dotted_algorithm_needs_the_allow_list_and_runs_its_own_checks(tmp_path):
    out = str(tmp_path / "run")
    assert "listed in algorithm.allow_import" in config_error(*tiny(out, f"algorithm.name={USER}"))
    allowed = tiny(out, f"algorithm.name={USER}", f"algorithm.allow_import=[{USER}]")
    assert "Sign-GRPO has no KL term" in config_error(*allowed, "algorithm.kl_beta=0.1")
    # inherited from Flow-GRPO: an all-ODE rollout has no log-probs to train
    assert "rollout.noise_level=0" in config_error(*allowed, "algorithm.kl_beta=0", "rollout.noise_level=0")
    missing = "user_algorithms_missing:SignGRPO"
    assert "cannot be imported" in config_error(
        *tiny(out, f"algorithm.name={missing}", f"algorithm.allow_import=[{missing}]")
    )


def test_a_user_algorithm_listed_only_in_the_rewards_allow_list_is_refused_naming_its_own_key(tmp_path):
    """reward.allow_import permits rewards only: no fallback, one line naming algorithm.allow_import."""
    message = config_error(*tiny(str(tmp_path / "run"), f"algorithm.name={USER}", f"reward.allow_import=[{USER}]"))
    lines = [line for line in message.splitlines() if "algorithm.name" in line]
    assert len(lines) == 1, message
    assert f"algorithm.allow_import=[{USER}]" in lines[0]
    assert "is a Python import path" in lines[0]


def test_a_checkpoints_algorithm_allow_list_is_never_trusted(tmp_path):
    """A stored config's algorithm.allow_import is replaced by the user's (as eval and resume do)."""
    stored = dataclasses.asdict(
        load_config(
            "experiment/toy/shapes_grpo",
            tiny(
                str(tmp_path / "run"),
                f"algorithm.name={USER}",
                f"algorithm.allow_import=[{USER}]",
                "algorithm.kl_beta=0",
            ),
        )
    )
    assert stored["algorithm"]["allow_import"] == [USER]
    with pytest.raises(ConfigError, match=r"algorithm.allow_import=\[user_algorithms:SignGRPO\]"):
        config_from_checkpoint(stored, "checkpoint/config.yaml", {"reward": [USER]}, check_machine=False)
    cfg = config_from_checkpoint(stored, "checkpoint/config.yaml", {"algorithm": [USER]}, check_machine=False)
    assert cfg.algorithm.allow_import == [USER]


def test_a_user_algorithm_trains_through_the_real_trainer(tmp_path):
    out = tmp_path / "run"
    cfg = load_config(
        "experiment/toy/shapes_grpo",
        tiny(out, f"algorithm.name={USER}", f"algorithm.allow_import=[{USER}]", "algorithm.kl_beta=0"),
    )
    trainer = Trainer(cfg)
    assert type(trainer.algorithm).__name__ == "SignGRPO"
    before = {k: v.clone() for k, v in trainer.parameters.items()}
    trainer.train()
    rows = read_rows(out / "metrics.csv")
    assert [int(r["step"]) for r in rows] == [1, 2]
    assert float(rows[0]["parity_max_abs_log_prob_diff"]) == 0.0  # it declares needs_old_logprob: parity ran
    assert all(math.isfinite(float(r["policy_loss"])) for r in rows)
    trained = [r for r in rows if float(r["trained_fraction"]) > 0]
    assert trained, "every step had constant rewards"
    for row in trained:  # its own statistic and declared extremes are logged: signs are -1, 0 or 1
        assert {float(row["advantage_sign_min"]), float(row["advantage_sign_max"])} <= {-1.0, 0.0, 1.0}
        assert "ratio_min" in row
    assert any(not torch.equal(before[k], v) for k, v in trainer.parameters.items())


def test_eval_and_resume_take_the_users_algorithm_allow_list():
    """`genalign eval` accepts algorithm.allow_import=[...] as an override and a resumed run may change
    it: a permission of this invocation, not run state."""
    from genalign.runs.resume import incompatible_keys
    from genalign.training.checkpoint_eval import EVAL_OVERRIDE_KEYS

    allowed, rest = split_allow_overrides([f"algorithm.allow_import=[{USER}]", "eval.max_prompts=2"], "genalign eval")
    assert allowed == {"reward": [], "model": [], "algorithm": [USER]} and rest == ["eval.max_prompts=2"]
    assert f"algorithm.allow_import=[{USER}]".startswith(EVAL_OVERRIDE_KEYS)
    assert incompatible_keys({"algorithm": {"allow_import": []}}, {"algorithm": {"allow_import": [USER]}}) == []
