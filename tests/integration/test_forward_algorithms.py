"""DiffusionNFT, AWM, online and offline Flow-DPO, DGPO and reward feedback through the whole loop
on the toy model: the run directory contract, the algorithm's columns, and bitwise resume (old policy
included; reward feedback's per-sample truncation draws and DRaFT-LV's re-noising)."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file
from support import TIMING_COLUMNS, read_rows
from support import toy_loop_overrides as overrides

from genalign.preflight.load import load_config
from genalign.training.trainer import Trainer

RUNS = {
    "nft": (
        "experiment/toy/shapes_nft",
        ["algorithm.kl_beta=1e-2"],
        ["nft_positive_loss", "nft_negative_loss", "old_policy_decay", "reward_mean", "kl"],
    ),
    "nft_lora": (
        "experiment/toy/shapes_nft",
        ["/model/toy=dit_lora", "rollout.noise_level=0.7"],
        ["nft_optimality", "old_velocity_gap"],
    ),
    # the time-to-target recipe: no reference KL, so no base-model forward and no reference policy
    # (4 schedule steps so that its timestep_fraction 0.3 still trains one σ per sample)
    "nft_fast": ("experiment/toy/shapes_nft_fast", ["rollout.num_steps=4"], ["nft_optimality", "old_policy_decay"]),
    # AWM with both KLs on (the anchor is algorithm state, soft-updated every step); 3 schedule
    # steps at fraction 0.9 leave indices 1..2 for its 6 strata; one micro-batch a step here
    "awm": (
        "experiment/toy/shapes_awm",
        ["actor.gradient_accumulation_steps=1"],
        ["awm_matching_loss", "awm_anchor_kl", "awm_anchor_decay", "awm_advantage", "kl", "reward_mean"],
    ),
    "dpo_online": ("experiment/toy/shapes_dpo", [], ["dpo_implicit_accuracy", "dpo_logit", "reward_mean"]),
    # 2 of the 3-step schedule's σ's; the rollout samples with the EMA weights after the first
    # optimizer step, so resume from checkpoint-2 must restore them and the step count
    "dgpo": (
        "experiment/toy/shapes_dgpo",
        [
            "algorithm.dgpo.num_timesteps=2",
            "algorithm.dgpo.max_timestep_index=2",
            "algorithm.dgpo.sample_with_ema_after=1",
            "actor.gradient_accumulation_steps=1",
        ],
        ["dgpo_group_weight", "dgpo_group_weight_min", "dgpo_clip_fraction", "dgpo_ema_decay", "kl", "reward_mean"],
    ),
    "dpo_offline": ("experiment/toy/offline_dpo", [], ["dpo_implicit_accuracy", "pairs"]),
    # the reference's online setting: pairs sampled with the DPO reference, refreshed from the
    # learner every 2 optimizer steps (so resume from checkpoint-2 must restore a refreshed one)
    "dpo_refreshed": (
        "experiment/toy/shapes_dpo",
        ["algorithm.dpo.sample_with=reference", "algorithm.dpo.ref_update_step=2"],
        ["dpo_implicit_accuracy", "dpo_reference_refreshed"],
    ),
    # reward feedback: ReFL's random late step (K in 1..3 of 4) and its x0 jump; DRaFT-LV's two
    # re-noised copies; AlignProp's Gaussian truncation, per-step checkpointing, CFG in the chain
    # (4 steps: the generic timestep_fraction check of the toy recipes' 0.3 needs int(4 * 0.3) >= 1)
    "refl": (
        "experiment/toy/shapes_draft",
        ["/base/algorithm=refl", "rollout.num_steps=4", "algorithm.reward_feedback.truncation_max=3"],
        ["feedback_reward", "chain_steps", "reward_mean"],
    ),
    "draft_lv": (
        "experiment/toy/shapes_draft",
        ["/base/algorithm=draft_lv", "rollout.num_steps=4"],
        ["feedback_reward", "chain_steps"],
    ),
    "alignprop": (
        "experiment/toy/shapes_draft",
        ["/base/algorithm=alignprop", "rollout.num_steps=4", "rollout.guidance_scale=2.0", "eval.guidance_scale=2.0"],
        ["feedback_reward", "chain_steps"],
    ),
    # DRTune: the whole chain of 4 from the stored noise, 2 supervised steps at a drawn offset,
    # the input detached, an early stop of up to 1 step
    "drtune": (
        "experiment/toy/shapes_drtune",
        [
            "rollout.num_steps=4",
            "algorithm.reward_feedback.supervised_steps=2",
            "algorithm.reward_feedback.early_stop_max=1",
        ],
        ["feedback_reward", "chain_steps", "supervised_steps"],
    ),
}


@pytest.fixture(scope="module", params=sorted(RUNS))
def finished(request, tmp_path_factory):
    recipe, extra, _ = RUNS[request.param]
    out = tmp_path_factory.mktemp(request.param)
    Trainer(load_config(recipe, overrides(out, *extra))).train()
    return request.param, out


def test_run_directory_and_columns(finished):
    name, out = finished
    for artefact in [
        "config.yaml",
        "metrics.csv",
        "eval_metrics.csv",
        "checkpoint-1",
        "checkpoint-final",
        "eval_epoch_0/contact_sheet.png",
        "eval_epoch_3/contact_sheet.png",
    ]:
        assert (out / artefact).exists(), artefact
    rows = read_rows(out / "metrics.csv")
    assert [r["step"] for r in rows] == ["1", "2", "3"]
    for column in RUNS[name][2] + ["loss", "grad_norm", "optimizer_steps"]:
        assert column in rows[0], column
    assert "parity_max_abs_log_prob_diff" not in rows[0]  # no log-probs to check
    assert float(rows[-1]["optimizer_steps"]) >= 1
    # NFT's old policy, AWM's anchor, DPO's reference and DGPO's EMA weights are algorithm state;
    # reward feedback keeps none
    stateless = RUNS[name][0] in ("experiment/toy/shapes_draft", "experiment/toy/shapes_drtune")
    assert (out / "checkpoint-final" / "algorithm.safetensors").exists() != stateless
    if name == "dpo_refreshed":
        assert [float(r["dpo_reference_refreshed"]) for r in rows] == [0.0, 1.0, 0.0]


def test_resume_continues_bitwise(finished, tmp_path):
    name, out = finished
    recipe, extra, _ = RUNS[name]
    Trainer(load_config(recipe, overrides(tmp_path, *extra, f"trainer.resume_from={out / 'checkpoint-2'}"))).train()
    original, resumed = read_rows(out / "metrics.csv"), read_rows(tmp_path / "metrics.csv")
    assert [r["step"] for r in resumed] == ["3"]
    for key, value in original[2].items():
        if key not in TIMING_COLUMNS:
            assert resumed[0].get(key, "") == value, key
    for file in ("trainable.safetensors", "algorithm.safetensors"):
        if (out / "checkpoint-final" / file).exists():
            a, b = load_file(str(out / "checkpoint-final" / file)), load_file(str(tmp_path / "checkpoint-final" / file))
            assert a.keys() == b.keys() and all((a[k] == b[k]).all() for k in a), file


def test_dgpo_sd3_recipe_on_a_tiny_sd3(tiny_sd3_dir, tmp_path):
    """The SD3.5 DGPO recipe's own settings (CFG 4.5 in the rollout, CFG-free training, the
    frozen base for the logit and the KL, the EMA weights for the clip) through the real
    diffusers SD3 path on a tiny random pipeline: it trains, and the LoRA moves."""
    from support import tiny_overrides

    extra = ["algorithm.dgpo.num_timesteps=2", "algorithm.dgpo.max_timestep_index=2", "trainer.num_steps=2"]
    cfg = load_config("experiment/diffusion/sd3_5/online_dgpo_ocr", tiny_overrides(tiny_sd3_dir, tmp_path, *extra))
    assert cfg.rollout.guidance_scale == 4.5 and cfg.rollout.noise_level == 0.0
    trainer = Trainer(cfg)
    initial = {k: v.clone() for k, v in trainer.policy.transformer.state_dict().items() if "lora_B" in k}
    trainer.train()
    rows = read_rows(tmp_path / "metrics.csv")
    assert [r["step"] for r in rows] == ["1", "2"]
    assert float(rows[-1]["optimizer_steps"]) >= 1 and "dgpo_group_weight" in rows[0]
    after = trainer.policy.transformer.state_dict()
    assert any(not torch.equal(after[k], v) for k, v in initial.items()), "the update did not move the LoRA"
