"""Cross-block checks of the algorithm choice: what each algorithm needs from the rollout and data.

Where it fits: `validate` calls `algorithm_problems` beside its other checks, so a combination
that cannot train is a config error naming the keys before any model loads:
* grpo trains on SDE log-probs: rollout.noise_level must be > 0 (checked in `validate`).
* nft trains on clean samples from any sampler (ODE or SDE), CFG-free: rollout.guidance_scale
  must be 1 (samples must come from v_old); its KL is on the velocity.
* dpo needs pairs: online, at least two samples per prompt; offline, a preference manifest.
* a token-autoregressive family (Janus-Pro) trains with a token algorithm (ar_grpo) and only
  with one; rollout.temperature is theirs alone.
"""

from __future__ import annotations

from genalign.algorithms.forward_losses import NFT_ADV_MODES
from genalign.config.schema import ExperimentConfig
from genalign.preflight.values import TOKEN_FAMILIES

DPO_SOURCES = ("online", "offline")
DPO_SAMPLERS = ("reference", "policy")
GUARD_BIASES = ("micro_batch", "per_sample")
TOKEN_ALGORITHMS = ("ar_grpo",)
"""Algorithms that train token trajectories (`TokenTrajectoryBatch`); every other one trains
flow-matching trajectories."""


def trajectory_kind_problems(cfg: ExperimentConfig) -> list[str]:
    """The family's trajectories against what the algorithm trains, and the token-only options."""
    family, name, rollout = cfg.model.family, cfg.algorithm.name, cfg.rollout
    token_family, token_algorithm = family in TOKEN_FAMILIES, name in TOKEN_ALGORITHMS
    problems: list[str] = []
    if token_family and not token_algorithm:
        problems.append(f"model.family={family} generates image tokens; algorithm.name={name!r} trains flow-matching "
                        f"trajectories. Use one of: {', '.join(TOKEN_ALGORITHMS)}")
    if token_algorithm and not token_family:
        problems.append(f"algorithm.name={name} trains image tokens; model.family={family} is a flow-matching family. "
                        f"Use a token family ({', '.join(TOKEN_FAMILIES)}) or algorithm.name=grpo")
    if token_family:
        flow_only = {"rollout.same_initial_noise": rollout.same_initial_noise,
                     "rollout.sde_window.size": rollout.sde_window.size, "rollout.ode_final_step": rollout.ode_final_step}
        for key, value in flow_only.items():
            if value:
                problems.append(f"{key}={value} shapes an SDE rollout; model.family={family} samples image tokens "
                                "(seeded per sample) and has none: remove it")
    if cfg.algorithm.token_log_prob != "guided" and not token_algorithm:
        problems.append(f"algorithm.token_log_prob={cfg.algorithm.token_log_prob} is read by "
                        f"{', '.join(TOKEN_ALGORITHMS)} only (algorithm.name={name}): remove it")
    if rollout.temperature <= 0:
        problems.append(f"rollout.temperature must be > 0 (the sampler's softmax temperature), got {rollout.temperature}")
    elif rollout.temperature != 1.0 and not token_family:
        problems.append(f"rollout.temperature={rollout.temperature} is read by token families only "
                        f"({', '.join(TOKEN_FAMILIES)}); model.family={family} samples with an SDE: remove it")
    return problems


def algorithm_problems(cfg: ExperimentConfig) -> list[str]:
    algorithm, rollout = cfg.algorithm, cfg.rollout
    problems: list[str] = trajectory_kind_problems(cfg)
    offline = algorithm.name == "dpo" and algorithm.dpo.source == "offline"
    if cfg.data.preference_manifest is not None and not offline:
        problems.append(f"data.preference_manifest is set but only algorithm.name=dpo with algorithm.dpo.source="
                        f"offline reads it (algorithm.name={algorithm.name!r}); remove it or select offline DPO")
    if algorithm.name == "nft":
        nft = algorithm.nft
        if rollout.guidance_scale != 1.0:
            problems.append(f"algorithm.name=nft trains CFG-free: its samples must come from the old policy's own "
                            f"velocity, so set rollout.guidance_scale=1.0 (got {rollout.guidance_scale})")
        if algorithm.kl_beta > 0 and algorithm.kl_type != "velocity":
            problems.append("algorithm.name=nft has no SDE mean to compare: with algorithm.kl_beta > 0 set "
                            "algorithm.kl_type=velocity (DiffusionNFT's KL is mean (v - v_ref)^2)")
        if nft.beta <= 0:
            problems.append(f"algorithm.nft.beta must be > 0, got {nft.beta}")
        if nft.adv_mode not in NFT_ADV_MODES:
            problems.append(f"algorithm.nft.adv_mode={nft.adv_mode!r}: choose one of {', '.join(NFT_ADV_MODES)}")
        if nft.adaptive_weight_min <= 0:
            problems.append(f"algorithm.nft.adaptive_weight_min must be > 0, got {nft.adaptive_weight_min}")
        if nft.old_decay_flat < 0 or nft.old_decay_rate < 0:
            problems.append("algorithm.nft.old_decay_flat and old_decay_rate must be >= 0, got "
                            f"{nft.old_decay_flat} and {nft.old_decay_rate}")
        if not 0 <= nft.old_decay_max < 1:
            problems.append(f"algorithm.nft.old_decay_max must be in [0, 1) (1 would freeze the sampling policy), "
                            f"got {nft.old_decay_max}")
    if algorithm.guard.bias not in GUARD_BIASES:
        problems.append(f"algorithm.guard.bias={algorithm.guard.bias!r}: choose one of {', '.join(GUARD_BIASES)}")
    if algorithm.name == "dpo":
        dpo = algorithm.dpo
        if dpo.beta <= 0:
            problems.append(f"algorithm.dpo.beta must be > 0, got {dpo.beta}")
        if dpo.sample_with not in DPO_SAMPLERS:
            problems.append(f"algorithm.dpo.sample_with={dpo.sample_with!r}: choose one of {', '.join(DPO_SAMPLERS)}")
        if dpo.ref_update_step < 0:
            problems.append(f"algorithm.dpo.ref_update_step must be >= 0 (0 never refreshes), got {dpo.ref_update_step}")
        if algorithm.kl_beta > 0:
            problems.append(f"algorithm.kl_beta={algorithm.kl_beta} is unused by algorithm.name=dpo (its reference "
                            "enters through the DPO logit, algorithm.dpo.beta): set it to 0")
        if dpo.source not in DPO_SOURCES:
            problems.append(f"algorithm.dpo.source={dpo.source!r}: choose one of {', '.join(DPO_SOURCES)}")
        elif offline and cfg.data.preference_manifest is None:
            problems.append("algorithm.dpo.source=offline needs data.preference_manifest (a .jsonl of prompt/chosen/"
                            "rejected rows, docs/preference_data.md)")
        elif not offline and rollout.n < 2:
            problems.append(f"algorithm.name=dpo online pairs the best and worst sample of each prompt group: "
                            f"rollout.n must be >= 2, got {rollout.n}")
        if dpo.source in DPO_SOURCES and rollout.rollout_batch_size > 0 and cfg.actor.gradient_accumulation_steps > 0:
            pairs = rollout.rollout_batch_size  # one pair per prompt (group) per step
            micro = cfg.actor.micro_batch_size or rollout.sample_batch_size
            micro_batches = -(-pairs // max(micro, 1)) * cfg.actor.num_inner_epochs
            if micro_batches % cfg.actor.gradient_accumulation_steps:
                problems.append(f"actor.gradient_accumulation_steps={cfg.actor.gradient_accumulation_steps} must "
                                f"divide the {micro_batches} pair micro-batches per step (ceil(rollout."
                                f"rollout_batch_size={pairs} pairs / train micro-batch {micro}) * "
                                "actor.num_inner_epochs)")
    return problems
