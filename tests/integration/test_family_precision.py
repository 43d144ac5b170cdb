"""Every family trains in the reduced precisions its presets use (bfloat16) or accept (float16),
on the CPU at tiny shapes: float32 LoRA masters and optimizer state, finite losses, both LoRA
matrices moving, and the parity preflight exact (rollout and replay share one compute path).

tests/integration/test_precision.py covers SD3 the same way (and the GPU cases); this file runs
the families whose presets default to bfloat16 — FLUX.1, Qwen-Image, Wan, Cosmos, Janus-Pro —
through their own recipes, two training steps each.
"""

from __future__ import annotations

import pytest
import torch
from support import read_rows, tiny_overrides, tiny_video_overrides

from genalign.models.spec import family_spec
from genalign.preflight.load import load_config
from genalign.training.trainer import Trainer

QUICK = ("trainer.num_steps=2", "trainer.save_every=0", "eval.every=0", "eval.at_start=false")
FAMILIES = {  # family -> (recipe, fixture with its tiny model, overrides(model_dir, out))
    "flux": (
        "experiment/diffusion/flux/online_grpo_ocr",
        "tiny_flux_dir",
        lambda d, o: tiny_overrides(d, o, "model.max_sequence_length=16", "rollout.num_steps=2"),
    ),
    "qwen_image": (
        "experiment/diffusion/qwen_image/online_grpo_ocr",
        "tiny_qwen_image_dir",
        # its window of 2 in the first 5 of 10 steps, shrunk to 1 in the first 1 of 2
        lambda d, o: tiny_overrides(
            d, o, "model.max_sequence_length=16", "rollout.num_steps=2", "rollout.sde_window.size=1"
        ),
    ),
    "wan": ("experiment/diffusion/wan_2_1/online_grpo_pickscore", "tiny_wan_dir", tiny_video_overrides),
    "cosmos": ("experiment/diffusion/cosmos/online_grpo_pickscore", "tiny_cosmos_dir", tiny_video_overrides),
    "janus": (
        "experiment/autoregressive/janus_pro/online_grpo_ocr",
        "tiny_janus_dir",
        lambda d, o: tiny_overrides(d, o, "rollout.height=32", "rollout.width=32"),
    ),
    "z_image": (
        "experiment/diffusion/z_image/turbo_online_grpo_pickscore",
        "tiny_z_image_dir",
        # its window of 1 in steps 1-3 of 6, shrunk to 1 in the first 1 of 2; PickScore off
        lambda d, o: tiny_overrides(
            d,
            o,
            "model.max_sequence_length=16",
            "rollout.num_steps=2",
            "rollout.sde_window.lo=0",
            "rollout.sde_window.hi=1",
            "reward.components.pickscore=0.0",
        ),
    ),
}


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_family_trains_in_reduced_precision_with_float32_masters(family, dtype, request, tmp_path):
    recipe, fixture, overrides = FAMILIES[family]
    model_dir = request.getfixturevalue(fixture)
    # the shared tiny overrides set the flow sampler's steps: a family that does not read them refuses them
    read = [o for o in overrides(model_dir, tmp_path) if family_spec(family).reads_override(o)]
    trainer = Trainer(load_config(recipe, [*read, f"model.dtype={dtype}", *QUICK]))
    assert trainer.policy.family == family and trainer.policy.dtype == getattr(torch, dtype)
    assert {p.dtype for p in trainer.parameters.values()} == {torch.float32}  # masters
    before = {name: p.detach().clone() for name, p in trainer.parameters.items()}
    trainer.train()
    rows = read_rows(tmp_path / "metrics.csv")
    assert [r["step"] for r in rows] == ["1", "2"]
    assert all(torch.isfinite(torch.tensor(float(r["loss"]))) for r in rows)
    assert float(rows[0]["parity_max_abs_log_prob_diff"]) == 0.0
    assert all(
        s.dtype == torch.float32
        for state in trainer.optimizer.state.values()
        for s in state.values()
        if torch.is_tensor(s) and s.numel() > 1
    )
    after = trainer.parameters
    assert all(torch.isfinite(p).all() for p in after.values())
    changed = [name for name in before if not torch.equal(before[name], after[name].detach())]
    assert any("lora_A" in name for name in changed) and any("lora_B" in name for name in changed)
    if dtype == "float16":
        assert float(rows[-1]["grad_scale"]) > 0  # loss scaling is on
