"""The memory plan of NextStep-1 (a model genalign builds itself, models/nextstep/): its sizes
from the shipped architecture file or a local checkpoint's root config.json, and its flow head's
walk counted once per image token (calibration `replay_outside_blocks`), not once per block."""

import re

import pytest

from genalign.models.architecture import TRANSFORMER, load_architecture, lora_parameters
from genalign.models.nextstep.policy import NEXTSTEP_LORA_TARGETS
from genalign.models.spec import OUTSIDE_BLOCKS, OUTSIDE_BLOCKS_STEPS, family_spec
from genalign.preflight import memory_math as mm
from genalign.preflight import memory_plan as mp
from genalign.preflight.load import load_config

RECIPE = "experiment/autoregressive/nextstep_1/online_grpo_ocr"


def test_outside_blocks_bytes_scale_by_rows_image_tokens_and_dtype():
    # rows x image tokens x bytes per token, measured at bfloat16 (2 bytes): float32 doubles it
    assert mm.outside_blocks_bytes(rows=3, image_tokens=5, dtype_bytes=2, per_image_token=7.0) == 3 * 5 * 7.0
    assert mm.outside_blocks_bytes(rows=3, image_tokens=5, dtype_bytes=4, per_image_token=7.0) == 2 * 3 * 5 * 7.0
    assert mm.outside_blocks_bytes(rows=3, image_tokens=5, dtype_bytes=2, per_image_token=0.0) == 0.0


def test_nextstep_large_is_built_from_its_file_on_the_meta_device():
    arch = load_architecture(family_spec("nextstep"), "stepfun-ai/NextStep-1-Large")
    assert arch is not None and arch.source.startswith("stepfun-ai--NextStep-1-Large.json")
    # the decoder's width, depth, KV heads and head size are Qwen2.5-14B's (the paper's decoder)
    assert (arch.hidden_size, arch.num_layers, arch.kv_heads, arch.head_dim) == (5120, 48, 8, 128)
    # the paper's 14B decoder and 157M head, and the image projectors: 14.95 B in one module
    assert arch.component(TRANSFORMER).parameters == pytest.approx(14.95e9, rel=0.002)
    assert arch.geometry.image_tokens(512, 512, 1) == 1024 and arch.latent_channels == 16
    names = {name for name, _, _ in arch.linear_shapes}
    assert "image_head.net.res_blocks.11.mlp.2" in names and "layers.47.self_attn.q_proj" in names
    # LoRA on the decoder's attention and every head MLP: r (in + out) per targeted Linear
    q = 32 * (5120 + 5120)
    assert lora_parameters(arch.linear_shapes, ["q_proj"], 32) == 48 * q


def test_a_local_checkpoint_is_read_from_its_root_config(tmp_path):
    from genalign.models.nextstep.tiny import build_tiny_nextstep

    build_tiny_nextstep(0).save_pretrained(tmp_path / "ckpt")
    arch = load_architecture(family_spec("nextstep"), str(tmp_path / "ckpt"))
    assert arch is not None and arch.source == str(tmp_path / "ckpt")
    assert arch.component(TRANSFORMER).parameters < 10_000_000 and arch.hidden_size == 64  # the tiny config


def test_the_heads_walk_is_planned_once_per_image_token():
    cfg = load_config(RECIPE, [], check_files=False)
    calibration = family_spec("nextstep").calibration()
    assert calibration["measured_on"].startswith("nextstep: ") and calibration[OUTSIDE_BLOCKS] > 0
    plan = mp.estimate_memory(cfg)
    assert plan is not None
    key, replay = next((k, v) for role in plan.roles for k, v in role.lines if k.startswith("replay activations"))
    rows, tokens = map(int, re.search(r"\((\d+) rows x (\d+) tokens", key).groups())
    assert tokens == 1024 + cfg.model.max_sequence_length  # 32 x 32 image tokens after the prompt
    blocks = mm.replay_activation_bytes(rows, tokens, 48, 5120, 2, calibration["replay"], 2.0, False)
    head = mm.outside_blocks_bytes(rows, 1024, 2, calibration[OUTSIDE_BLOCKS])
    reference = mm.rollout_working_bytes(rows, tokens, 5120, 2, calibration["rollout_peak"])  # kl_beta 0.01
    assert replay == pytest.approx(blocks + head + reference)
    assert head > blocks  # why the head is its own term: 49 head steps a token outweigh the 48 blocks
    assert set(NEXTSTEP_LORA_TARGETS) == set(cfg.model.lora.target_modules)


def test_the_heads_term_scales_with_its_stochastic_steps():
    """Replay keeps every stochastic head step (rollout.num_steps − 1 a token): the calibration
    names the step count it was measured at, and the plan scales the head's term from there."""
    calibration = family_spec("nextstep").calibration()
    assert calibration[OUTSIDE_BLOCKS_STEPS] == 50  # the authors' num_sampling_steps, HeadSampling's
    assert mm.outside_blocks_step_scale(50, 50) == 1.0 and mm.outside_blocks_step_scale(20, 50) == 19 / 49
    assert mm.outside_blocks_step_scale(20, None) == 1.0  # a term that does not grow with the walk

    def replay(steps: int) -> float:
        cfg = load_config(RECIPE, [f"rollout.num_steps={steps}"], check_files=False)
        plan = mp.estimate_memory(cfg)
        assert plan is not None
        return next(v for role in plan.roles for k, v in role.lines if k.startswith("replay activations"))

    head_50 = mm.outside_blocks_bytes(2, 1024, 2, calibration[OUTSIDE_BLOCKS])  # the recipe's 2 rows
    assert replay(50) - replay(20) == pytest.approx(head_50 * (1 - 19 / 49))
