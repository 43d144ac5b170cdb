"""Algorithms by `algorithm.name`: a registered short name, or a dotted "package.module:Class"
of your own listed in algorithm.allow_import (its own permission, as a user's reward has
reward.allow_import and a user's family model.allow_import)."""

from genalign.config.registry import Registry

ALGORITHMS = Registry("algorithm", "algorithm.name", dotted_key="algorithm.allow_import")
ALGORITHMS.register("grpo", "genalign.algorithms.grpo:FlowGRPO")
ALGORITHMS.register("grpo_guard", "genalign.algorithms.grpo:GRPOGuard")
ALGORITHMS.register("nft", "genalign.algorithms.nft:DiffusionNFT")
ALGORITHMS.register("dpo", "genalign.algorithms.dpo:FlowDPO")
ALGORITHMS.register("ar_grpo", "genalign.algorithms.token_grpo:TokenGRPO")
ALGORITHMS.register("dgpo", "genalign.algorithms.dgpo:DGPO")
ALGORITHMS.register("reward_feedback", "genalign.algorithms.reward_feedback:RewardFeedback")
ALGORITHMS.register("awm", "genalign.algorithms.awm:AdvantageWeightedMatching")
ALGORITHMS.register("flow_dppo", "genalign.algorithms.dppo:FlowDPPO")
ALGORITHMS.register("sft", "genalign.algorithms.sft:FlowSFT")


def algorithm_class(cfg) -> type:
    """The class `cfg.algorithm.name` selects (an `ExperimentConfig`): its declarations decide
    the reference, the data source and the rollout's records before anything is built."""
    return ALGORITHMS.resolve(cfg.algorithm.name, cfg.algorithm.allow_import)


def registered_algorithms() -> dict[str, type]:
    """Every registered name and its class (imports the built-in algorithm modules)."""
    return {name: ALGORITHMS.resolve(name) for name in ALGORITHMS.names()}
