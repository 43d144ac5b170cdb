"""An algorithm from a user's module (`tests/user_algorithms.py`), named by its dotted path and
allowed through reward.allow_import like a user's reward: checked at config time by its own
`config_problems`, then trained on the toy model through the real trainer. Nothing in the
package is registered or patched."""

from __future__ import annotations

import math

import pytest
import torch

from genalign.config.errors import ConfigError
from genalign.config.loader import load_config
from genalign.training.trainer import Trainer
from support import read_rows

USER = "user_algorithms:SignGRPO"


def tiny(out, *extra: str) -> list[str]:
    return ["rollout.num_steps=4", "rollout.n=2", "rollout.rollout_batch_size=2", "rollout.sample_batch_size=4",
            "actor.gradient_accumulation_steps=1", "algorithm.timestep_fraction=0.5", "eval.num_steps=2",
            "eval.max_prompts=2", "eval.samples_per_prompt=2", "eval.batch_size=4", "eval.every=0",
            "trainer.num_steps=2", "trainer.save_every=0", f"trainer.output_dir={out}", "trainer.progress_bar=false",
            # the shape reward is 0 for every blob of so short a run; compressibility varies
            "reward.components.toy_shape=0.0", "reward.components.jpeg_compressibility=1.0", *extra]


def config_error(*overrides: str) -> str:
    with pytest.raises(ConfigError) as error:
        load_config("experiment/toy/shapes_grpo", list(overrides))
    return str(error.value)


def test_a_dotted_algorithm_needs_the_allow_list_and_runs_its_own_checks(tmp_path):
    out = str(tmp_path / "run")
    assert "listed in reward.allow_import" in config_error(*tiny(out, f"algorithm.name={USER}"))
    allowed = tiny(out, f"algorithm.name={USER}", f"reward.allow_import=[{USER}]")
    assert "Sign-GRPO has no KL term" in config_error(*allowed, "algorithm.kl_beta=0.1")
    # inherited from Flow-GRPO: an all-ODE rollout has no log-probs to train
    assert "rollout.noise_level=0" in config_error(*allowed, "algorithm.kl_beta=0", "rollout.noise_level=0")
    missing = "user_algorithms_missing:SignGRPO"
    assert "cannot be imported" in config_error(*tiny(out, f"algorithm.name={missing}",
                                                       f"reward.allow_import=[{missing}]"))


def test_a_user_algorithm_trains_through_the_real_trainer(tmp_path):
    out = tmp_path / "run"
    cfg = load_config("experiment/toy/shapes_grpo", tiny(out, f"algorithm.name={USER}", f"reward.allow_import=[{USER}]",
                                                         "algorithm.kl_beta=0"))
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
