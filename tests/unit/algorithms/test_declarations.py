"""What each algorithm declares (reference, data source, trajectories, log-probs, rollout
means) and its own config checks, read from the classes alone — nothing outside
`algorithms/` decides these by name."""

from __future__ import annotations

import dataclasses

import pytest

from genalign.algorithms.awm import AdvantageWeightedMatching
from genalign.algorithms.config import AlgorithmConfig, DPOConfig
from genalign.algorithms.dgpo import DGPO
from genalign.algorithms.dpo import FlowDPO
from genalign.algorithms.dppo import FlowDPPO
from genalign.algorithms.grpo import FlowGRPO, GRPOGuard
from genalign.algorithms.nft import DiffusionNFT
from genalign.algorithms.registry import ALGORITHMS, algorithm_class, registered_algorithms
from genalign.algorithms.reward_feedback import RewardFeedback
from genalign.algorithms.token_grpo import TokenGRPO
from genalign.preflight.algorithm_checks import algorithm_problems
from genalign.preflight.load import load_config

NO_KL, KL = AlgorithmConfig(kl_beta=0.0), AlgorithmConfig(kl_beta=0.04)


@pytest.mark.parametrize(
    "cls, policy_kind, old_log_probs, rollout_means",
    [
        (FlowGRPO, "flow", True, False),
        (GRPOGuard, "flow", True, True),
        (FlowDPPO, "flow", True, True),
        (DiffusionNFT, "flow", False, False),
        (FlowDPO, "flow", False, False),
        (DGPO, "flow", False, False),
        (AdvantageWeightedMatching, "flow", False, False),
        (TokenGRPO, "token", True, False),
        (RewardFeedback, "flow", False, False),
    ],
)
def test_each_algorithm_declares_what_it_trains(cls, policy_kind, old_log_probs, rollout_means):
    assert (cls.policy_kind, cls.needs_old_logprob, cls.needs_rollout_means) == (
        policy_kind,
        old_log_probs,
        rollout_means,
    )


@pytest.mark.parametrize("cls", [FlowGRPO, GRPOGuard, FlowDPPO, DiffusionNFT, AdvantageWeightedMatching, TokenGRPO])
def test_a_kl_term_asks_for_the_frozen_reference(cls):
    assert (cls.reference_kind(NO_KL), cls.reference_kind(KL)) == ("none", "frozen")
    assert cls.data_source(KL) == "online"


def test_only_ar_grpo_reads_which_token_log_prob_the_rollout_records():
    from genalign.training.setup import rollout_spec

    conditional = AlgorithmConfig(name="ar_grpo", token_log_prob="conditional")
    assert TokenGRPO.guided_log_probs(AlgorithmConfig(name="ar_grpo")) and not TokenGRPO.guided_log_probs(conditional)
    assert all(cls.guided_log_probs(conditional) for cls in (FlowGRPO, GRPOGuard, DiffusionNFT, FlowDPO))
    janus = "experiment/autoregressive/janus_pro/online_grpo_ocr"
    assert rollout_spec(load_config(janus)).guided_log_probs
    assert not rollout_spec(load_config(janus, ["algorithm.token_log_prob=conditional"])).guided_log_probs


def test_dpo_keeps_its_own_reference_and_reads_its_source():
    assert FlowDPO.reference_kind(NO_KL) == "own"
    assert FlowDPO.data_source(AlgorithmConfig(name="dpo")) == "online"
    assert FlowDPO.data_source(AlgorithmConfig(name="dpo", dpo=DPOConfig(source="offline"))) == "offline"


def test_the_registry_names_every_built_in_and_algorithm_class_follows_the_config():
    assert set(registered_algorithms()) == {
        "grpo",
        "grpo_guard",
        "nft",
        "dpo",
        "ar_grpo",
        "dgpo",
        "reward_feedback",
        "awm",
        "flow_dppo",
        "sft",
    }
    assert algorithm_class(load_config("experiment/toy/shapes_nft")) is DiffusionNFT
    assert ALGORITHMS.dotted_key == "algorithm.allow_import"  # its own permission, not a reward's


def test_only_reward_feedback_back_propagates_through_the_reward():
    assert RewardFeedback.needs_reward_gradients
    assert not any(cls.needs_reward_gradients for cls in (FlowGRPO, GRPOGuard, DiffusionNFT, FlowDPO, TokenGRPO))
    assert all(cls.backprop_forwards(KL, 10) == (1, False) for cls in (FlowGRPO, DiffusionNFT, FlowDPO, TokenGRPO))


def test_only_clipped_ratio_algorithms_log_ratio_extremes():
    assert FlowGRPO.stat_extremes == {"ratio": ("min", "max"), "log_prob_drift": ("max",)}
    assert TokenGRPO.stat_extremes == FlowGRPO.stat_extremes
    assert DiffusionNFT.stat_extremes == FlowDPO.stat_extremes == AdvantageWeightedMatching.stat_extremes == {}


def with_values(cfg, **algorithm):
    return dataclasses.replace(cfg, algorithm=dataclasses.replace(cfg.algorithm, **algorithm))


def test_config_problems_are_each_algorithms_own():
    grpo = load_config("experiment/toy/shapes_grpo")
    assert FlowGRPO.config_problems(grpo) == []
    ode = dataclasses.replace(grpo, rollout=dataclasses.replace(grpo.rollout, noise_level=0.0))
    assert any("rollout.noise_level=0" in p for p in FlowGRPO.config_problems(ode))
    nft = load_config("experiment/toy/shapes_nft")
    assert nft.rollout.noise_level == 0 and DiffusionNFT.config_problems(nft) == []  # any sampler, the ODE too
    bad_nft = with_values(nft, nft=dataclasses.replace(nft.algorithm.nft, beta=0.0))
    assert DiffusionNFT.config_problems(bad_nft) == ["algorithm.nft.beta must be > 0, got 0.0"]
    dpo = load_config("experiment/toy/shapes_dpo")
    assert FlowDPO.config_problems(dpo) == []
    assert any("unused by algorithm.name=dpo" in p for p in FlowDPO.config_problems(with_values(dpo, kl_beta=0.1)))
    guard = load_config("experiment/toy/shapes_grpo_guard")
    assert GRPOGuard.config_problems(guard) == []
    cps = dataclasses.replace(guard, rollout=dataclasses.replace(guard.rollout, kernel="cps"))
    assert any("normalises a Gaussian log-ratio" in p for p in GRPOGuard.config_problems(cps))


def test_an_option_of_another_algorithm_is_refused_by_name_of_its_owner():
    grpo = load_config("experiment/toy/shapes_grpo")
    nft_option = with_values(grpo, nft=dataclasses.replace(grpo.algorithm.nft, beta=0.1))
    assert algorithm_problems(nft_option) == [
        "algorithm.nft.beta=0.1 is a DiffusionNFT option, but algorithm.name='grpo'; remove it or set "
        "algorithm.name=nft"
    ]
    token_option = with_values(grpo, token_log_prob="conditional")
    assert "is an AR-GRPO option" in algorithm_problems(token_option)[0]
    # the chosen algorithm's own options are its to read
    assert algorithm_problems(load_config("experiment/toy/shapes_grpo_guard")) == []


def test_the_family_kind_must_match_the_algorithms():
    grpo = load_config("experiment/toy/shapes_grpo")
    token = with_values(grpo, name="ar_grpo")
    message = algorithm_problems(token)[0]
    assert "trains image tokens" in message and "Use one of: " in message and "grpo" in message
