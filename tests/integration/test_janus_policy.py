"""Janus-Pro's policy on the tiny JanusForConditionalGeneration: loading through the real
transformers classes, the token sampler against the model's own `generate(generation_mode=
"image")`, its log-probs against transformers' own CFG and temperature processors, teacher
forcing, the VQ decode, shard invariance, and the exported peft adapter."""

from __future__ import annotations

import pytest
import torch
from support import TINY_DEPTH, TINY_REDUCTION, assert_close_reordered, make_groups

from genalign.models.janus import JanusPolicy
from genalign.rollout.collector import SamplingSpec, generate

PROMPTS = ["a red stop sign", "hi"]  # different lengths: the second is left-padded


@pytest.fixture(scope="module")
def policy(tiny_janus_dir):
    return JanusPolicy.from_pretrained(str(tiny_janus_dir), "float32", "cpu")


def test_an_uncached_hub_id_offline_says_how_to_fix_it(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(FileNotFoundError, match="not cached") as error:
        JanusPolicy.from_pretrained("genalign-test/not-a-cached-janus", "float32", "cpu")
    assert "hf download genalign-test/not-a-cached-janus" in str(error.value)


def test_loads_the_saved_model_and_processor(policy, tiny_janus_dir):
    from genalign.models.janus.tiny import build_tiny_janus

    built = build_tiny_janus(seed=0).model.state_dict()
    loaded = policy.model.state_dict()
    assert built.keys() == loaded.keys() and all(torch.equal(built[k], loaded[k]) for k in built)
    assert (policy.num_image_tokens, policy.image_size) == (16, 32)
    assert type(policy.transformer).__name__ == "LlamaModel"
    cond = policy.encode_prompts(PROMPTS, with_negative=True)
    assert cond.input_ids[:, -1].tolist() == [policy.boi_id] * 2  # the processor's <begin_of_image>
    assert cond.attention_mask[1].tolist().count(0) > 0  # left padding, masked
    kept = (cond.negative_input_ids == policy.bos_id) | (cond.negative_input_ids == policy.boi_id)
    assert (cond.negative_input_ids[~kept] == policy.pad_id).all()


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_sampler_draws_what_generate_draws_for_the_same_seed(policy, temperature):
    cond = policy.encode_prompts(PROMPTS, with_negative=True)
    for row in range(len(PROMPTS)):
        real = cond.attention_mask[row].bool()
        torch.manual_seed(1234 + row)
        expected = policy.model.generate(
            input_ids=cond.input_ids[row : row + 1, real],
            attention_mask=cond.attention_mask[row : row + 1, real],
            generation_mode="image",
            do_sample=True,
            top_k=0,
            temperature=temperature,
            guidance_scale=5.0,
        )
        ours = policy.sample_tokens(cond.index([row]), [torch.Generator().manual_seed(1234 + row)], 5.0, temperature)
        assert torch.equal(ours.tokens, expected), row


def test_log_probs_are_log_softmax_of_transformers_guided_logits(policy):
    """Sampled tokens re-scored position by position with a plain (cache-free) forward and
    transformers' own ClassifierFreeGuidance + Temperature processors; teacher forcing agrees."""
    from transformers.generation.logits_process import ClassifierFreeGuidanceLogitsProcessor, TemperatureLogitsWarper

    cond = policy.encode_prompts(PROMPTS, with_negative=True)
    sampled = policy.sample_tokens(cond, [torch.Generator().manual_seed(s) for s in (1, 2)], 5.0, 0.7)
    ids = torch.cat([cond.input_ids, cond.negative_input_ids])  # [2B, L]
    mask = torch.cat([cond.attention_mask, cond.negative_attention_mask])
    cfg, temperature = ClassifierFreeGuidanceLogitsProcessor(5.0), TemperatureLogitsWarper(0.7)
    logit_scale = 0.0
    with torch.no_grad():
        for position in (0, 7, 15):
            tokens = torch.cat([sampled.tokens, sampled.tokens])[:, :position]  # [2B, position]
            embeds = torch.cat(
                [
                    policy.model.get_input_embeddings()(ids),
                    policy.model.prepare_embeddings_for_image_generation(tokens),
                ],
                dim=1,
            )
            full_mask = torch.cat([mask, mask.new_ones(mask.shape[0], position)], dim=1)
            hidden = policy.model.model.language_model(inputs_embeds=embeds, attention_mask=full_mask).last_hidden_state
            scores = policy.model.model.generation_head(hidden[:, -1])  # [2B, V]
            guided = temperature(cond.input_ids, cfg(cond.input_ids, scores))  # [B, V]
            expected = torch.log_softmax(guided, -1).gather(-1, sampled.tokens[:, position : position + 1])[:, 0]
            # the sampler's cached incremental decode vs one full forward: the same math in another
            # order; log-softmax carries the logits' error, scaled by CFG (|1 − w| + |w| = 9) / T = 0.7
            logit_scale = max(logit_scale, float(scores.abs().max()))
            assert_close_reordered(
                sampled.log_probs[:, position],
                expected,
                length=TINY_REDUCTION,
                depth=TINY_DEPTH,
                gain=9.0 / 0.7,
                scale=logit_scale,
            )
    forced = policy.token_log_probs(cond, sampled.tokens, 5.0, 0.7)  # [B, N], one forward
    assert forced.shape == (2, 16)
    assert_close_reordered(
        forced, sampled.log_probs, length=TINY_REDUCTION, depth=TINY_DEPTH, gain=9.0 / 0.7, scale=logit_scale
    )


def test_decode_is_the_vq_decoder_as_uint8(policy):
    tokens = torch.randint(0, 64, (2, 16), generator=torch.Generator().manual_seed(0))
    images = policy.decode_tokens(tokens)
    assert images.shape == (2, 3, 32, 32) and images.dtype == torch.uint8
    with torch.no_grad():
        pixels = policy.model.decode_image_tokens(tokens)  # [B, H, W, 3]
    expected = ((pixels + 1) / 2 * 255).clamp(0, 255).to(torch.uint8).permute(0, 3, 1, 2)
    assert torch.equal(images, expected)


def test_rollout_is_shard_and_chunk_invariant_with_exact_replay(policy):
    groups = make_groups(prompts_per_step=2, samples_per_prompt=2)
    spec = SamplingSpec(
        height=32, width=32, num_steps=1, guidance_scale=5.0, noise_level=0.0, chunk_size=4, temperature=1.0
    )
    whole = generate(policy, groups, spec)
    whole.validate()
    assert whole.log_probs.shape == (4, 1, 16) and whole.images.shape == (4, 3, 32, 32)
    chunked = generate(policy, groups, SamplingSpec(**{**spec.__dict__, "chunk_size": 1}))
    shard = generate(policy, groups, spec, positions=[2, 3])
    assert torch.equal(chunked.tokens, whole.tokens) and torch.equal(shard.tokens, whole.tokens[2:])
    assert len(set(map(tuple, whole.tokens.tolist()))) == 4  # distinct seeds, distinct samples
    conditional = generate(policy, groups, SamplingSpec(**{**spec.__dict__, "guided_log_probs": False}))
    assert torch.equal(conditional.tokens, whole.tokens) and conditional.scored_guidance_scale == 1.0
    cond = policy.encode_prompts(groups.prompts, with_negative=False)
    assert torch.equal(conditional.log_probs[:, 0], policy.token_log_probs(cond, whole.tokens, 1.0, 1.0).detach())
    assert not torch.allclose(conditional.log_probs, whole.log_probs, atol=1e-3)
    with pytest.raises(ValueError, match="rollout.height=32"):
        generate(policy, groups, SamplingSpec(**{**spec.__dict__, "height": 64, "width": 64}))


def test_exported_adapter_loads_onto_janus_and_reproduces_the_policy(tiny_janus_dir, tmp_path):
    from peft import PeftModel
    from transformers import JanusForConditionalGeneration

    from genalign.models.config import LoraConfig
    from genalign.weights.lora import apply_lora, export_lora_for_peft, trainable_state_dict

    trained = JanusPolicy.from_pretrained(str(tiny_janus_dir), "float32", "cpu")
    lora = LoraConfig(rank=4, alpha=8, init="default")
    apply_lora(trained.transformer, lora, trained.lora_target_modules)
    with torch.no_grad():
        for name, param in trained.transformer.named_parameters():
            if "lora_B" in name:
                param.normal_(generator=torch.Generator().manual_seed(len(name)))
    export_lora_for_peft(
        trained.transformer,
        tmp_path / "lora",
        lora,
        trained.peft_module_prefix,
        str(tiny_janus_dir),
        trainable_state=trainable_state_dict(trained.transformer),
    )
    base = JanusForConditionalGeneration.from_pretrained(str(tiny_janus_dir))
    loaded = PeftModel.from_pretrained(base, str(tmp_path / "lora")).eval()
    adapted = [name for name, _ in loaded.named_modules() if name.endswith("lora_A")]
    assert adapted and all(".language_model." in name for name in adapted)  # not the vision tower's q/k/v
    reloaded = JanusPolicy(loaded.get_base_model(), trained.processor, torch.device("cpu"), torch.float32)
    cond = trained.encode_prompts(PROMPTS, with_negative=True)
    tokens = torch.randint(0, 64, (2, 16), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        ours = trained.token_log_probs(cond, tokens, 5.0, 1.0)
        theirs = reloaded.token_log_probs(cond, tokens, 5.0, 1.0)
        base_policy = JanusPolicy.from_pretrained(str(tiny_janus_dir), "float32", "cpu")
        untrained = base_policy.token_log_probs(cond, tokens, 5.0, 1.0)
    assert torch.allclose(ours, theirs, atol=1e-6)
    assert not torch.allclose(ours, untrained, atol=1e-3)  # the adapter does change the policy
