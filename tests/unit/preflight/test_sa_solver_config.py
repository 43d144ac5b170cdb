"""rollout.sampler=sa_solver (docs/algorithms.md §11.4): AWM's default, refused where the
algorithm trains on more than the final sample, where a kernel-only key is set, and for a token
family; rollout_spec hands the collector the solver's settings."""

from __future__ import annotations

import pytest

from genalign.config.errors import ConfigError
from genalign.preflight.load import load_config
from genalign.preflight.validate import validate
from genalign.training.setup import rollout_spec

AWM = "experiment/toy/shapes_awm"


def test_awm_samples_with_the_sa_solver_by_default_and_with_the_kernel_on_request():
    cfg = load_config(AWM)
    assert validate(cfg, check_machine=False) == []
    spec = rollout_spec(cfg)
    assert spec.sa_solver == cfg.rollout.sa_solver and spec.sa_solver.tau == 0.4
    euler = load_config(AWM, ["rollout.sampler=kernel"])
    assert validate(euler, check_machine=False) == [] and rollout_spec(euler).sa_solver is None


def _error(recipe, overrides):
    with pytest.raises(ConfigError) as caught:
        load_config(recipe, overrides)
    return str(caught.value)


@pytest.mark.parametrize(
    "recipe, overrides, fragment",
    [
        (
            "experiment/toy/shapes_grpo",
            ["rollout.sampler=sa_solver", "rollout.noise_level=0"],
            "set rollout.sampler=kernel",
        ),
        (
            "experiment/toy/shapes_nft",
            ["rollout.sampler=sa_solver", "rollout.noise_level=0"],
            "records only the trajectory",
        ),
        (AWM, ["rollout.noise_level=0.7"], "rollout.noise_level=0.7 shapes the kernel sampler"),
        (AWM, ["rollout.sde_window.size=1"], "rollout.sde_window.size=1 shapes the kernel sampler"),
        (AWM, ["rollout.sa_solver.predictor_order=5"], "rollout.sa_solver.predictor_order must be in 1..4"),
        (AWM, ["rollout.sa_solver.tau=-0.1"], "rollout.sa_solver.tau must be >= 0"),
        (AWM, ["rollout.sa_solver.corrector_order=4", "rollout.num_steps=2"], "needs rollout.num_steps >= 3"),
        (AWM, ["rollout.sampler=dpm"], "rollout.sampler='dpm'"),
        (
            "experiment/autoregressive/janus_pro/online_grpo_ocr",
            ["rollout.sampler=sa_solver"],
            "rollout.sampler=sa_solver shapes an SDE rollout; model.family=janus samples image tokens",
        ),
    ],
)
def test_bad_sampler_settings_are_config_errors(recipe, overrides, fragment):
    message = _error(recipe, overrides)
    assert fragment in message, message
