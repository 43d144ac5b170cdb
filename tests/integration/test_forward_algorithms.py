"""DiffusionNFT, online and offline Flow-DPO through the whole loop on the toy model: the run
directory contract, the algorithm's columns, and bitwise resume (old policy included)."""

from __future__ import annotations

import pytest
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
    "dpo_online": ("experiment/toy/shapes_dpo", [], ["dpo_implicit_accuracy", "dpo_logit", "reward_mean"]),
    "dpo_offline": ("experiment/toy/offline_dpo", [], ["dpo_implicit_accuracy", "pairs"]),
    # the reference's online setting: pairs sampled with the DPO reference, refreshed from the
    # learner every 2 optimizer steps (so resume from checkpoint-2 must restore a refreshed one)
    "dpo_refreshed": (
        "experiment/toy/shapes_dpo",
        ["algorithm.dpo.sample_with=reference", "algorithm.dpo.ref_update_step=2"],
        ["dpo_implicit_accuracy", "dpo_reference_refreshed"],
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
    # NFT's old policy and DPO's reference are algorithm state
    assert (out / "checkpoint-final" / "algorithm.safetensors").exists()
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
