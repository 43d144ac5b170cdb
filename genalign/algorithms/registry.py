"""Algorithms by `algorithm.name`."""

from genalign.config.registry import Registry

ALGORITHMS = Registry("algorithm", "algorithm.name")
ALGORITHMS.register("grpo", "genalign.algorithms.grpo:FlowGRPO")
ALGORITHMS.register("grpo_guard", "genalign.algorithms.grpo:GRPOGuard")
ALGORITHMS.register("nft", "genalign.algorithms.nft:DiffusionNFT")
ALGORITHMS.register("dpo", "genalign.algorithms.dpo:FlowDPO")
ALGORITHMS.register("ar_grpo", "genalign.algorithms.token_grpo:TokenGRPO")
