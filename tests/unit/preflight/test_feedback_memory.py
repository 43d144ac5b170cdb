"""Reward feedback's memory beyond the chain: the VAE decode and the reward models' image towers
run under grad, counted by autograd's saved-tensor hooks on the meta device
(`models/saved_tensors.py`), and the plan's replay phase grows by them (docs/memory_plan.md)."""

import torch

from genalign.models.saved_tensors import saved_tensor_bytes
from genalign.preflight import memory_plan as mp
from genalign.preflight.load import load_config

DRTUNE = "experiment/diffusion/sd3_5/online_drtune_hpsv21"


def test_the_meta_count_is_what_a_real_decode_saves():
    """The same hooks on the real tiny SD3 VAE on the CPU and on its copy built on the meta
    device count nearly the same storages: the meta run is the real op sequence, without
    memory. They differ only where a kernel is chosen by device: the mid-block attention (meta
    takes the math path and keeps the probabilities, the CPU's fused kernel its q, k, v, output
    and log-sum-exp), 6 % of this tiny decoder's total (about 1 % at 512 px, where the
    attention's share is smaller), so the bound is 10 %."""
    from diffusers import AutoencoderKL

    from genalign.models.sd3.tiny import build_tiny_sd3_pipeline

    vae = build_tiny_sd3_pipeline(seed=0).vae
    latents = torch.randn(2, vae.config.latent_channels, 8, 8)
    real = saved_tensor_bytes(vae, lambda z: vae.decode(z, return_dict=False)[0], latents)
    with torch.device("meta"):
        meta_vae = AutoencoderKL.from_config(vae.config)
    meta = saved_tensor_bytes(
        meta_vae, lambda z: meta_vae.decode(z, return_dict=False)[0], torch.empty(2, *latents.shape[1:], device="meta")
    )
    assert abs(real - meta) <= 0.1 * real
    weights = sum(p.numel() * 4 for p in vae.parameters())
    assert real > 2 * 3 * 64 * 64 * 4  # at least the decoded image's worth of activations
    assert real != weights  # the weights are not what is counted


def replay_phase(cfg) -> dict[str, float]:
    role = mp.estimate_memory(cfg).roles[0]
    [replay] = [phase for phase in role.phases if phase.name == "replay"]
    return dict(replay.lines)


def test_the_plan_counts_the_decode_and_the_reward_under_grad_and_grows_with_them():
    small = load_config(DRTUNE, ["actor.micro_batch_size=1"], check_files=False)
    large = load_config(DRTUNE, ["actor.micro_batch_size=2"], check_files=False)
    lines = {rows: replay_phase(cfg) for rows, cfg in ((1, small), (2, large))}
    for rows, phase in lines.items():
        [decode] = [v for k, v in phase.items() if k.startswith("VAE decode under grad")]
        [reward] = [v for k, v in phase.items() if k.startswith("training reward hpsv21") and "under grad" in k]
        [chain] = [v for k, v in phase.items() if k.startswith("replay activations")]
        assert decode > 0 and reward > 0
        # SD3.5's decoder at 512 px keeps several GiB an image: more than the 5 checkpointed forwards
        assert decode > chain / rows
        assert sum(phase.values()) >= chain + decode + reward
    # twice the images, twice the decode and the reward tower's activations
    for prefix in ("VAE decode under grad", "training reward hpsv21"):
        one = sum(v for k, v in lines[1].items() if k.startswith(prefix) and "under grad" in k)
        two = sum(v for k, v in lines[2].items() if k.startswith(prefix) and "under grad" in k)
        assert abs(two - 2 * one) <= 1e-6 * two


def test_an_algorithm_without_reward_gradients_counts_neither():
    cfg = load_config("experiment/diffusion/sd3_5/online_grpo_hpsv21", [], check_files=False)
    for role in mp.estimate_memory(cfg).roles:
        lines = [what for phase in role.phases for what, _ in phase.lines] + [what for what, _ in role.resident]
        assert lines and not any("under grad" in what for what in lines)
