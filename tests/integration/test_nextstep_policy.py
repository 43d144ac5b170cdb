"""The NextStep-1 policy on its tiny random model (genalign/models/nextstep/tiny.py): saved and
loaded back through `from_pretrained`, rolled out by the real token collector, replayed with
parity exactly 0, and trained two AR-GRPO steps (Flow-GRPO on each token's head: LoRA and a
full fine-tune)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from support import make_groups

from genalign.algorithms.config import AlgorithmConfig
from genalign.algorithms.token_grpo import TokenGRPO
from genalign.models.config import LoraConfig
from genalign.models.nextstep import NextStepPolicy
from genalign.models.nextstep.policy import HeadSampling
from genalign.models.nextstep.sampling import Streams, sample_walks
from genalign.models.nextstep.tiny import build_tiny_nextstep
from genalign.rollout.collector import SamplingSpec, generate
from genalign.weights.lora import apply_lora, freeze_for_full_finetune, trainable_parameters

HEIGHT, WIDTH = 32, 48  # a 2 x 3 token grid (16 pixels a token)
SAMPLING = HeadSampling(num_steps=4, shift=1.0)  # 3 SDE steps + the last Euler step


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("nextstep")
    build_tiny_nextstep(seed=0).save_pretrained(path)
    return path


def _policy(tiny_dir) -> NextStepPolicy:
    loaded = NextStepPolicy.from_pretrained(str(tiny_dir), "float32", "cpu")
    return NextStepPolicy(loaded.model, loaded.tokenizer, loaded.vae, loaded.device, loaded.dtype, SAMPLING)


def _spec(**overrides) -> SamplingSpec:
    values = dict(height=HEIGHT, width=WIDTH, num_steps=1, guidance_scale=3.0, noise_level=0.0, chunk_size=4)
    return SamplingSpec(**{**values, **overrides})


def test_saved_tiny_model_loads_back_with_the_same_weights(tiny_dir):
    policy = _policy(tiny_dir)
    built = build_tiny_nextstep(seed=0)
    for name, tensor in built.model.state_dict().items():
        assert torch.equal(policy.model.state_dict()[name], tensor), name
    policy.check_image_size(HEIGHT, WIDTH)
    assert policy.grid == (2, 3) and policy.num_image_tokens == 6
    with pytest.raises(ValueError, match="rollout.height/width=40x48"):
        policy.check_image_size(40, 48)


def test_prompts_end_in_the_image_prefix_left_padded_together(tiny_dir):
    policy = _policy(tiny_dir)
    policy.check_image_size(HEIGHT, WIDTH)
    cond = policy.encode_prompts(["a red circle", "hi"], with_negative=True)
    tail = policy.tokenizer.convert_ids_to_tokens(cond.input_ids[0, -5:].tolist())
    assert tail[0] == "<|image_area|>" and tail[-1] == "<|begin_of_image|>"
    assert policy.tokenizer.decode(cond.input_ids[0, -4:-1]) == "2*3"
    assert cond.attention_mask[1, 0] == 0 and cond.negative_attention_mask[0, 0] == 0  # left padding
    assert cond.input_ids.shape == cond.negative_input_ids.shape


def test_rollout_is_chunk_invariant_and_replay_is_exact(tiny_dir):
    policy = _policy(tiny_dir)
    groups = make_groups(prompts_per_step=2, samples_per_prompt=2)
    whole = generate(policy, groups, _spec())
    whole.validate()
    steps = SAMPLING.num_steps - 1  # stochastic head steps per token
    assert whole.tokens.shape == (4, 6, SAMPLING.num_steps + 1, 64)
    assert whole.log_probs.shape == (4, 1, 6 * steps) and whole.images.shape == (4, 3, HEIGHT, WIDTH)
    assert torch.isfinite(whole.log_probs).all()
    chunked = generate(policy, groups, _spec(chunk_size=1))
    # a sample draws from its own generator; continuous tokens carry the batch size's matmul
    # rounding (fp32, unit-scale values: ~1e-6), discrete ones would not
    torch.testing.assert_close(chunked.tokens, whole.tokens, rtol=1e-4, atol=1e-4)
    assert not torch.equal(whole.tokens[0], whole.tokens[1])  # distinct seeds, distinct samples
    algorithm = TokenGRPO(AlgorithmConfig(name="ar_grpo", kl_beta=0.0))
    replayed = algorithm.replay_log_probs(policy, whole, [0], chunk_size=4)
    assert torch.equal(replayed, whole.log_probs)  # parity exactly 0


@pytest.mark.parametrize(
    "num_steps, kernel, noise_level",
    [(7, "em_sde", 1.0), (5, "flow_sde", 0.7), (3, "dance_sde", 0.4)],  # flow_sde: σ_0 = 1 takes σ_1's guard
)
def test_build_policy_walks_the_head_as_rollout_says_and_replay_is_exact(tiny_dir, num_steps, kernel, noise_level):
    """rollout.num_steps / kernel / noise_level reach the head through `build_policy` (as every
    copy of the policy is built: trainer, Ray workers, evaluation): walks of num_steps + 1
    states, num_steps − 1 log-probs a token, replay parity exactly 0; a walk of another length
    is refused."""
    from genalign.config.schema import ExperimentConfig
    from genalign.training.setup import build_policy

    cfg = ExperimentConfig()
    cfg.model.family, cfg.model.path, cfg.model.dtype, cfg.model.device = "nextstep", str(tiny_dir), "float32", "cpu"
    cfg.rollout.num_steps, cfg.rollout.kernel, cfg.rollout.noise_level = num_steps, kernel, noise_level
    policy = build_policy(cfg)
    assert (policy.sampling.num_steps, policy.sampling.kernel, policy.sampling.noise_level) == (
        num_steps,
        kernel,
        noise_level,
    )
    groups = make_groups(prompts_per_step=1, samples_per_prompt=2)
    batch = generate(policy, groups, _spec(chunk_size=2))
    assert batch.tokens.shape == (2, 6, num_steps + 1, 64) and batch.log_probs.shape == (2, 1, 6 * (num_steps - 1))
    assert torch.isfinite(batch.log_probs).all()
    algorithm = TokenGRPO(AlgorithmConfig(name="ar_grpo", kl_beta=0.0))
    with torch.no_grad():
        assert torch.equal(algorithm.replay_log_probs(policy, batch, [0], chunk_size=2), batch.log_probs)
    other = _policy(tiny_dir)  # HeadSampling(num_steps=4): 5 states a token
    with pytest.raises(ValueError, match="rollout.num_steps=4 \\(5 states\\)"):
        algorithm.replay_log_probs(other, batch, [0], chunk_size=2)


def test_teacher_forcing_scores_what_the_sampler_walked(tiny_dir):
    """The one-forward teacher forcing re-scores each head step as the sampler drew it (the key-
    value cache and the full forward differ by float rounding only), and a zero-noise walk
    sits at each step's mean: log N(μ; μ, std²) = −log std − ½ log 2π."""
    policy = _policy(tiny_dir)
    policy.check_image_size(HEIGHT, WIDTH)
    cond = policy.encode_prompts(["a red circle", "hi"], with_negative=True)
    generators = [torch.Generator().manual_seed(seed) for seed in (3, 4)]
    sampled = policy.sample_tokens(cond, generators, 3.0, 1.0)
    # measured 2e-7 on log-probs of order 1: the cache and the full forward round differently
    torch.testing.assert_close(
        policy.token_log_probs(cond, sampled.tokens, 3.0, 1.0), sampled.log_probs, rtol=0, atol=1e-5
    )
    streams = Streams(
        torch.cat([cond.input_ids, cond.negative_input_ids]),
        torch.cat([cond.attention_mask, cond.negative_attention_mask]),
    )
    zeros = lambda k: torch.zeros(2, 64)  # noqa: E731  a zero-noise walk: x_{k+1} is the mean itself
    walks, drawn = sample_walks(policy.model, streams, 6, policy.sigmas, 3.0, "em_sde", 1.0, zeros, True)
    std = torch.sqrt(2 * policy.sigmas[:3] * (policy.sigmas[:3] - policy.sigmas[1:4]))  # [3]
    at_mean = (-torch.log(std) - 0.5 * torch.log(torch.tensor(2 * torch.pi))).repeat(6)  # [6·3]
    torch.testing.assert_close(drawn, at_mean.expand(2, -1), rtol=0, atol=1e-6)
    torch.testing.assert_close(policy.token_log_probs(cond, walks, 3.0, 1.0), at_mean.expand(2, -1), rtol=0, atol=1e-4)


@pytest.mark.parametrize("mode", ["lora", "full"])
def test_two_ar_grpo_steps_train_decoder_and_head(tiny_dir, mode):
    policy = _policy(tiny_dir)
    if mode == "lora":
        apply_lora(policy.transformer, LoraConfig(rank=4, alpha=8), policy.lora_target_modules)
    else:
        freeze_for_full_finetune(policy.transformer)
    params = trainable_parameters(policy.transformer)
    before = [p.detach().clone() for p in params]
    optimizer = torch.optim.AdamW(params, lr=1e-3)
    algorithm = TokenGRPO(AlgorithmConfig(name="ar_grpo", kl_beta=0.0))
    groups = make_groups(prompts_per_step=1, samples_per_prompt=2)
    for step in range(2):
        batch = generate(policy, groups, _spec())
        advantages = torch.tensor([1.0, -1.0])
        loss, stats = algorithm.compute_loss(policy, batch, advantages, 0)
        if step == 0:
            assert torch.allclose(stats["ratio"], torch.ones_like(stats["ratio"]))  # on-policy: ratio 1
        optimizer.zero_grad()
        loss.backward()
        grads = {n: p.grad for n, p in policy.transformer.named_parameters() if p.requires_grad}
        assert any(g is not None and g.abs().sum() > 0 for n, g in grads.items() if "layers." in n)
        assert any(g is not None and g.abs().sum() > 0 for n, g in grads.items() if "image_head" in n)
        optimizer.step()
        assert torch.isfinite(loss)
    assert any(not torch.equal(b, p.detach()) for b, p in zip(before, params))


@pytest.mark.parametrize("mode", ["lora", "full"])
def test_a_trained_model_exports_in_the_authors_layout_and_loads_back_strictly(tiny_dir, tmp_path, mode):
    """The final checkpoint's `model/` (export/folder.py, `FamilySpec.export="checkpoint"`): the
    whole model, a LoRA merged into its base weights, under the parameter names the authors'
    `NextStep` saves (the reference weights their code wrote), the loaded config.json, tokenizer
    and vae/ beside it; `from_pretrained` (strict) loads it back and samples what the trained
    policy samples: bit for bit after a full fine-tune; after a merge up to the rounding of
    W + s·BA against the adapter's separate product."""
    from safetensors import safe_open

    from genalign.config.schema import ExperimentConfig
    from genalign.export.folder import checkpoint_export
    from genalign.weights.lora import trainable_state_dict

    policy = _policy(tiny_dir)
    if mode == "lora":
        apply_lora(policy.transformer, LoraConfig(rank=4, alpha=8), policy.lora_target_modules)
    else:
        freeze_for_full_finetune(policy.transformer)
    with torch.no_grad():  # a "trained" model: every trained tensor moved (LoRA B is 0 at init)
        for parameter in trainable_parameters(policy.transformer):
            parameter.add_(0.05 * torch.randn(parameter.shape, generator=torch.Generator().manual_seed(7)))
    cfg = ExperimentConfig()
    cfg.model.family, cfg.model.path, cfg.model.train_mode = "nextstep", str(tiny_dir), mode
    cfg.trainer.output_dir = str(tmp_path / "run")
    trained = trainable_state_dict(policy.transformer)
    writer = checkpoint_export(cfg, policy, trained, None, False, 2, {}, final=False)
    assert writer is None  # only the final checkpoint carries the whole model
    writer = checkpoint_export(cfg, policy, trained, None, False, 2, {}, final=True)
    writer(tmp_path / "checkpoint")
    out = tmp_path / "checkpoint" / "model"
    assert "NextStepPipeline(model_name_or_path=" in (out / "README.md").read_text()
    reference = Path(__file__).resolve().parents[1] / "reference_outputs" / "nextstep_1" / "model.safetensors"
    with safe_open(out / "model.safetensors", "pt") as ours, safe_open(reference, "pt") as theirs:
        assert set(ours.keys()) == set(theirs.keys())  # the authors' names, nothing more or less
    assert json.loads((out / "config.json").read_text()) == json.loads((tiny_dir / "config.json").read_text())

    loaded = NextStepPolicy.from_pretrained(str(out), "float32", "cpu")
    loaded = NextStepPolicy(loaded.model, loaded.tokenizer, loaded.vae, loaded.device, loaded.dtype, SAMPLING)
    tokens = []
    for each in (policy, loaded):
        each.check_image_size(HEIGHT, WIDTH)
        cond = each.encode_prompts(["a red circle", "hi"], with_negative=True)
        generators = [torch.Generator().manual_seed(seed) for seed in (3, 4)]
        tokens.append(each.sample_tokens(cond, generators, 3.0, 1.0).tokens)
    if mode == "full":
        assert torch.equal(tokens[0], tokens[1])
    else:  # W + s·BA against x·W + s·(x·A)·B in fp32 on values up to ~5: measured 4e-6 after 6 tokens x 4 steps
        torch.testing.assert_close(tokens[1], tokens[0], rtol=1e-4, atol=1e-4)
        assert not torch.equal(
            loaded.model.layers[0].self_attn.q_proj.weight,
            build_tiny_nextstep(0).model.layers[0].self_attn.q_proj.weight,
        )


def test_a_checkpoint_past_one_shard_is_written_as_shards_and_their_index(tiny_dir, tmp_path):
    from genalign.models.nextstep.checkpoint import load_checkpoint_state, write_checkpoint

    bundle = build_tiny_nextstep(seed=0)
    state = bundle.model.state_dict()
    write_checkpoint(tmp_path, bundle.config, state, bundle.tokenizer, bundle.vae, max_shard_size="200KB")
    index = json.loads((tmp_path / "model.safetensors.index.json").read_text())
    shards = sorted(set(index["weight_map"].values()))
    assert len(shards) > 1 and shards[0] == f"model-00001-of-{len(shards):05d}.safetensors"
    assert set(index["weight_map"]) == set(state) and not (tmp_path / "model.safetensors").exists()
    loaded = load_checkpoint_state(tmp_path)
    assert all(torch.equal(loaded[name], tensor) for name, tensor in state.items())
    NextStepPolicy.from_pretrained(str(tmp_path), "float32", "cpu")  # strict
