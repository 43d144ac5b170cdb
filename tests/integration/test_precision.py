"""Every accepted compute dtype trains: float32 masters under bf16/fp16 autocast, on the CPU
at tiny shapes and (marker `gpu`, skipped without CUDA) on a GPU.

Issue 8 found the SD3.5 recipe stopping at its first update in fp16 (AdamW on fp16 LoRA
weights: 0/0 at init). These runs take 3 real training steps through the Trainer.
"""

from __future__ import annotations

import pytest
import torch
from support import SD3_RECIPE as RECIPE
from support import TINY_DEPTH, TINY_REDUCTION, assert_close_reordered, read_rows, tiny_overrides

from genalign.models.sd3 import SD3Policy
from genalign.preflight.load import load_config
from genalign.rollout.collector import SamplingSpec, encode_unique
from genalign.training.precision import compile_denoiser
from genalign.training.trainer import Trainer

CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
CASES = [
    pytest.param("cpu", "bfloat16", "joint", id="cpu-bf16"),
    pytest.param("cpu", "float16", "split", id="cpu-fp16-split"),
    pytest.param("cuda", "bfloat16", "split", id="cuda-bf16-split", marks=[pytest.mark.gpu, CUDA]),
    pytest.param("cuda", "float16", "joint", id="cuda-fp16", marks=[pytest.mark.gpu, CUDA]),
]


@pytest.mark.parametrize("device,dtype,cfg_batch", CASES)
def test_reduced_precision_trains_with_float32_masters(tiny_sd3_dir, tmp_path, device, dtype, cfg_batch):
    cfg = load_config(
        RECIPE,
        tiny_overrides(
            tiny_sd3_dir,
            tmp_path,
            f"model.device={device}",
            f"model.dtype={dtype}",
            f"model.cfg_batch={cfg_batch}",
            "trainer.save_every=0",
            "eval.every=0",
            "eval.at_start=false",
        ),
    )
    trainer = Trainer(cfg)
    policy = trainer.policy
    assert policy.dtype == getattr(torch, dtype)
    assert {p.dtype for p in trainer.parameters.values()} == {torch.float32}  # masters
    assert policy.transformer.pos_embed.proj.weight.dtype == getattr(torch, dtype)  # frozen base computes in it
    assert all(
        s.dtype == torch.float32
        for state in trainer.optimizer.state.values()
        for s in state.values()
        if torch.is_tensor(s) and s.numel() > 1
    )
    before = {name: p.detach().clone() for name, p in trainer.parameters.items()}
    trainer.train()
    rows = read_rows(tmp_path / "metrics.csv")
    assert len(rows) == 3
    assert all(torch.isfinite(torch.tensor(float(r["loss"]))) for r in rows)
    assert float(rows[0]["parity_max_abs_log_prob_diff"]) == 0.0  # rollout and replay: one compute path
    after = trainer.parameters
    assert all(torch.isfinite(p).all() for p in after.values())
    changed = [name for name in before if not torch.equal(before[name], after[name].detach())]
    assert any("lora_A" in name for name in changed) and any("lora_B" in name for name in changed)
    if dtype == "float16":
        assert "grad_scale" in rows[-1] and float(rows[-1]["grad_scale"]) > 0


@pytest.mark.parametrize(
    "mode,graphs",
    # regional is model.compile_mode's default; the whole-denoiser graph compiles for a minute on a
    # CPU, so it runs in the slow pass (and on a GPU with -m gpu)
    [("regional", 2), pytest.param("full", 1, marks=pytest.mark.slow)],
)
@pytest.mark.parametrize(
    "device,dtype,atol,mean_atol",
    [
        pytest.param("cpu", "float32", None, None, id="cpu-fp32"),  # the reordering bound (tests/support.py)
        pytest.param("cuda", "bfloat16", 0.1, 3e-2, id="cuda-bf16", marks=[pytest.mark.gpu, CUDA]),
    ],
)
def test_compiled_denoiser_agrees_with_eager(tiny_sd3_dir, device, dtype, atol, mean_atol, mode, graphs):
    """Compilation (regional: each of the tiny model's 2 blocks; full: the whole denoiser)
    changes kernels, not the function. The stated tolerance: fp32 within the reordering bound
    (reassociation only: tests/support.reorder_tolerance); bf16 to 0.1 per element and 3e-2 on average —
    one bf16 ulp of an O(1) branch output is 8e-3 and CFG at w = 4.5 scales a branch's
    rounding by up to 2w − 1 = 8 (measured on an H100: max 0.041, mean 0.012)."""
    policy = SD3Policy.from_pretrained(tiny_sd3_dir, dtype=getattr(torch, dtype), device=device, max_sequence_length=8)
    generator = torch.Generator().manual_seed(0)
    latents = torch.randn(2, *policy.latent_shape(64, 64), generator=generator).to(device)  # [2, 4, 8, 8]
    cond = encode_unique(policy, ["a red sign", "hello"], with_negative=True)
    sigma = torch.tensor([0.7, 0.3], device=device)  # [2]
    eager = policy.velocity(latents, sigma, cond, 4.5)
    assert compile_denoiser(policy.transformer, mode, policy.repeated_blocks) == graphs
    compiled = policy.velocity(latents, sigma, cond, 4.5)
    if dtype == "float32":  # reassociation only: the rounding-error bound, CFG gain |1 − w| + |w| = 8
        assert_close_reordered(compiled, eager, length=TINY_REDUCTION, depth=TINY_DEPTH, gain=8.0)
        return
    torch.testing.assert_close(compiled, eager, atol=atol, rtol=0)
    assert (compiled - eager).abs().mean().item() <= mean_atol


@pytest.mark.gpu
@CUDA
def test_rollout_leaves_no_gpu_memory_behind(tiny_sd3_dir):
    """Trajectories come back on the CPU: after a rollout the device holds what it held before
    (plus at most the allocator's rounding), so replay and backward get the memory."""
    from genalign.data.prompts import PromptExample
    from genalign.data.sampler import PromptSampler
    from genalign.rollout.collector import generate

    policy = SD3Policy.from_pretrained(tiny_sd3_dir, dtype=torch.bfloat16, device="cuda", max_sequence_length=8)
    sampler = PromptSampler([PromptExample(prompt=f"sign {i}", prompt_id=i) for i in range(4)], 2, 4, seed=0)
    spec = SamplingSpec(height=64, width=64, num_steps=4, guidance_scale=4.5, noise_level=0.7, chunk_size=4)
    generate(policy, sampler.sample(1), spec)  # warm-up: cuBLAS workspaces, caching allocator
    torch.cuda.synchronize()
    baseline = torch.cuda.memory_allocated()
    batch = generate(policy, sampler.sample(2), spec)
    torch.cuda.synchronize()
    assert batch.latents.device.type == "cpu" and batch.log_probs.device.type == "cpu"
    assert torch.cuda.memory_allocated() - baseline <= 1 << 20
