"""ToyPolicy on the shipped weights: the FlowPolicy contract, batched CFG, the real loading
path (SD3Transformer2DModel.from_pretrained) round trip, LoRA targets, rollout/replay parity."""

import pytest
import torch
from support import assert_close_reordered

from genalign.data.sampler import PromptGroupBatch
from genalign.models.base import FlowPolicy
from genalign.models.config import LoraConfig, ModelConfig
from genalign.models.spec import family_spec
from genalign.models.toy.network import TRANSFORMER_CONFIG, save_toy_model, velocity_from_x0
from genalign.models.toy.policy import ToyPolicy
from genalign.rollout.collector import SamplingSpec, generate
from genalign.sampling.schedules import flow_match_sigmas
from genalign.training.parity import replay_parity
from genalign.weights.lora import apply_lora, trainable_parameters


@pytest.fixture(scope="module")
def policy():
    return ToyPolicy.from_pretrained("builtin")


def test_builtin_loads_through_the_registry_as_a_flow_policy():
    policy = family_spec("toy").policy_class().from_config(ModelConfig(family="toy", path="builtin", device="cpu"))
    from diffusers import SD3Transformer2DModel

    assert isinstance(policy, FlowPolicy)
    assert isinstance(policy.transformer, SD3Transformer2DModel)
    assert next(policy.transformer.parameters()).dtype == torch.float32
    assert not any(p.requires_grad for p in policy.transformer.parameters())
    assert 3e5 < sum(p.numel() for p in policy.transformer.parameters()) < 1e6


def test_shapes_schedule_and_decode(policy):
    assert policy.latent_shape(32, 32) == (3, 32, 32)
    with pytest.raises(ValueError, match="rollout.height=32"):
        policy.latent_shape(16, 16)
    torch.testing.assert_close(policy.sigmas(10, (3, 32, 32)), flow_match_sigmas(10, shift=1.0))
    images = policy.decode(torch.tensor([-1.0, 0.0, 1.0, 3.0]).view(1, 1, 2, 2).expand(1, 3, 2, 2))
    assert images.dtype == torch.uint8 and images[0, 0].flatten().tolist() == [0, 128, 255, 255]


def test_encode_prompts(policy):
    cond = policy.encode_prompts(["a red circle", "a blue cross"], with_negative=True)
    assert cond.embeds.shape == (2, 2, 32) and cond.pooled.shape == (2, 64)
    assert torch.equal(cond.negative_embeds[0], cond.negative_embeds[1])
    assert not torch.equal(cond.embeds[0], cond.embeds[1])
    assert policy.encode_prompts(["a red circle"], with_negative=False).negative_embeds is None
    with pytest.raises(ValueError, match="hexagon"):
        policy.encode_prompts(["a red hexagon"], with_negative=False)


def test_cfg_is_one_batched_forward_equal_to_two_branches(policy):
    generator = torch.Generator().manual_seed(0)
    latents = torch.randn(3, 3, 32, 32, generator=generator)
    sigma = torch.tensor([0.9, 0.5, 0.1])
    cond = policy.encode_prompts(["a red circle", "a green square", "a blue triangle"], with_negative=True)
    guided = policy.velocity(latents, sigma, cond, guidance_scale=3.0)
    assert guided.shape == (3, 3, 32, 32) and guided.dtype == torch.float32
    uncond = policy.velocity(latents, sigma, type(cond)(cond.negative_embeds, cond.negative_pooled), 1.0)
    text = policy.velocity(latents, sigma, cond, 1.0)
    # batch 6 vs batch 3 changes how the GEMMs group their sums: the x̂0 the network predicts
    # differs by rounding (longest reduction: the 4·64-wide MLP; 4 layers), which the velocity
    # (x − x̂0)/σ divides by σ ≥ 0.1 and CFG scales by |1 − w| + |w| = 5
    x0_scale = float((latents - sigma.view(-1, 1, 1, 1) * uncond).abs().max())
    assert_close_reordered(
        guided,
        uncond + 3.0 * (text - uncond),
        length=4 * 64,
        depth=TRANSFORMER_CONFIG["num_layers"],
        gain=(2.0 + 3.0) / 0.1,
        scale=x0_scale,
    )
    with pytest.raises(ValueError, match="with_negative=True"):
        policy.velocity(latents, sigma, policy.encode_prompts(["a red circle"] * 3, False), 3.0)


def test_save_and_load_round_trip(policy, tmp_path):
    save_toy_model(tmp_path / "toy", policy.transformer, policy.text_encoder, {"note": "round trip"})
    loaded = ToyPolicy.from_pretrained(tmp_path / "toy")
    assert loaded.transformer.config.num_layers == TRANSFORMER_CONFIG["num_layers"]
    latents, sigma = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(1)), torch.tensor([0.7, 0.3])
    cond = policy.encode_prompts(["a red circle", "a yellow cross"], False)
    torch.testing.assert_close(loaded.velocity(latents, sigma, cond, 1.0), policy.velocity(latents, sigma, cond, 1.0))
    with pytest.raises(FileNotFoundError, match="pretrain-demo"):
        ToyPolicy.from_pretrained(tmp_path / "missing")


def test_lora_attaches_to_the_sd3_attention_projections():
    policy = ToyPolicy.from_pretrained("builtin")
    apply_lora(policy.transformer, LoraConfig(rank=4, alpha=8), policy.lora_target_modules)
    names = [n for n, p in policy.transformer.named_parameters() if p.requires_grad]
    assert names and all("lora_" in n for n in names)
    assert any("attn.add_q_proj" in n for n in names) and any("attn.to_out.0" in n for n in names)
    assert len(trainable_parameters(policy.transformer)) == len(names)


def test_rollout_replay_parity_before_any_update(policy):
    """Acceptance 1: replayed log-probs equal the rollout's (≤ 1e-6) with unchanged weights."""
    prompts = ["a red circle"] * 4 + ["a blue square"] * 4
    groups = PromptGroupBatch(
        prompts=prompts,
        prompt_ids=torch.tensor([0] * 4 + [1] * 4),
        group_ids=torch.tensor([0] * 4 + [1] * 4),
        seeds=torch.arange(8) + 100,
        metadata=[{} for _ in prompts],
    )
    spec = SamplingSpec(height=32, width=32, num_steps=10, guidance_scale=1.0, noise_level=0.7, chunk_size=4)
    batch = generate(policy, groups, spec)
    assert batch.images.shape == (8, 3, 32, 32) and batch.log_probs.shape == (8, 10)
    gaps = replay_parity(policy, batch, list(range(9)), spec.chunk_size)
    assert max(gaps.values()) <= 1e-6


def test_velocity_from_x0_by_hand():
    """v = (x − x̂0) / max(σ, 0.05): x = 1, x̂0 = 0.5 -> 1 at σ = 0.5, 10 at σ = 0.01 (floored)."""
    x, x0 = torch.ones(2, 1, 1, 1), torch.full((2, 1, 1, 1), 0.5)
    torch.testing.assert_close(
        velocity_from_x0(x, x0, torch.tensor([0.5, 0.01])), torch.tensor([1.0, 10.0]).view(2, 1, 1, 1)
    )


def test_x0_model_velocity_is_the_converted_transformer_output(policy):
    """The shipped model predicts x̂0; its velocity is (x − x̂0)/σ, with CFG applied before the
    conversion (which is affine in x̂0, so the order does not matter); a "velocity" model's
    output is used as is."""
    assert policy.prediction == "x0"
    latents = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(2))
    sigma = torch.tensor([0.8, 0.2])
    cond = policy.encode_prompts(["a red circle", "a blue cross"], with_negative=True)
    raw = ToyPolicy(policy.transformer, policy.text_encoder, policy.device, prediction="velocity")
    for scale in (1.0, 3.0):
        x0 = raw.velocity(latents, sigma, cond, scale)
        # CFG on x̂0 then (x − x̂0)/σ vs CFG on the velocities: elementwise, reordered (no reduction);
        # the roundings of values up to max(|x|, |x̂0|) scaled by CFG's |1 − w| + |w| and 1/σ
        assert_close_reordered(
            policy.velocity(latents, sigma, cond, scale),
            velocity_from_x0(latents, x0, sigma),
            length=1,
            depth=4,
            gain=(abs(1 - scale) + scale) / float(sigma.min()),
            scale=max(float(latents.abs().max()), float(x0.abs().max())),
        )
    with pytest.raises(ValueError, match="prediction 'eps'"):
        ToyPolicy(policy.transformer, policy.text_encoder, policy.device, prediction="eps")
