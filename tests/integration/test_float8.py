"""model.float8: torchao's float8 training in the denoiser's linear layers, on the CPU through
torchao's emulation (model.float8_emulate: float8-rounded values, float32 matmuls), at the tiny
SD3's shapes. What a GPU adds (the float8 kernels, their speed) is the GPU suite's lever
`compiled_float8` (benchmarks/gpu_suite_plan.py)."""

from __future__ import annotations

import re

import diffusers
import pytest
import torch
from safetensors.torch import load_file
from support import SD3_RECIPE as RECIPE
from support import read_rows, tiny_overrides

from genalign.config.errors import ConfigError
from genalign.models.config import LoraConfig
from genalign.models.sd3 import SD3Policy
from genalign.preflight.float8_checks import FLOAT8_CAPABILITY
from genalign.preflight.load import load_config
from genalign.training.precision import convert_to_float8, float8_layer_filter, make_master_weights
from genalign.training.trainer import Trainer
from genalign.weights.lora import apply_lora, export_lora_for_diffusers

pytest.importorskip("torchao.float8", reason="model.float8 needs torchao: pip install 'genalign[float8]'")

FLOAT8 = ("model.dtype=bfloat16", "model.float8=tensorwise", "model.float8_emulate=true")


def lora_policy(model_dir) -> SD3Policy:
    policy = SD3Policy.from_pretrained(model_dir, dtype=torch.bfloat16, device="cpu", max_sequence_length=8)
    apply_lora(policy.transformer, LoraConfig(rank=4, alpha=8), policy.lora_target_modules)
    make_master_weights(policy.transformer)
    return policy


def test_layer_filter_skips_lora_matrices_and_dims_off_16():
    assert float8_layer_filter(torch.nn.Linear(32, 48), "blocks.0.attn.to_q.base_layer")
    assert not float8_layer_filter(torch.nn.Linear(32, 16), "blocks.0.attn.to_q.lora_A.default")
    assert not float8_layer_filter(torch.nn.Linear(16, 32), "blocks.0.attn.to_q.lora_B.default")
    assert not float8_layer_filter(torch.nn.Linear(32, 40), "proj_out")  # 40 outputs
    assert not float8_layer_filter(torch.nn.Linear(24, 32), "proj_in")  # 24 inputs


def test_conversion_swaps_every_base_linear_and_keeps_the_parameters(tiny_sd3_dir):
    policy = lora_policy(tiny_sd3_dir)
    transformer = policy.transformer
    linears = {name for name, m in transformer.named_modules() if type(m) is torch.nn.Linear}
    adapters = {name for name in linears if ".lora_A." in name or ".lora_B." in name}
    base = linears - adapters
    assert len(adapters) == 2 * sum(name.endswith(".base_layer") for name in base) > 0
    before = dict(transformer.named_parameters())
    assert convert_to_float8(transformer, "rowwise", emulate=True) == len(base)  # the tiny SD3: every dim % 16 == 0
    swapped = {name for name, m in transformer.named_modules() if type(m).__name__ == "Float8Linear"}
    assert swapped == base
    after = dict(transformer.named_parameters())
    assert list(after) == list(before)  # state-dict names unchanged: checkpoints, exports, sync
    assert all(after[name] is before[name] for name in before)  # the same tensors: masters stay masters
    assert {p.dtype for p in after.values() if p.requires_grad} == {torch.float32}


def test_float8_run_trains_at_parity_zero_and_exports_a_loadable_lora(tiny_sd3_dir, tmp_path):
    """One training step: rollout and replay run the same float8 layers, so the parity preflight
    is exactly 0; the trained adapter exports under the names diffusers loads."""
    cfg = load_config(
        RECIPE,
        tiny_overrides(
            tiny_sd3_dir,
            tmp_path,
            *FLOAT8,
            "trainer.num_steps=1",
            "trainer.save_every=0",
            "eval.every=0",
            "eval.at_start=false",
        ),
    )
    trainer = Trainer(cfg)
    assert sum(type(m).__name__ == "Float8Linear" for m in trainer.policy.transformer.modules()) > 0
    initial = {name: p.detach().clone() for name, p in trainer.parameters.items()}
    trainer.train()
    rows = read_rows(tmp_path / "metrics.csv")
    assert [r["step"] for r in rows] == ["1"]
    assert float(rows[0]["parity_max_abs_log_prob_diff"]) == 0.0
    assert torch.isfinite(torch.tensor(float(rows[0]["loss"])))
    moved = [name for name, p in trainer.parameters.items() if not torch.equal(initial[name], p.detach())]
    assert any("lora_B" in name for name in moved)
    assert all(torch.isfinite(p).all() and p.dtype == torch.float32 for p in trainer.parameters.values())

    exported = export_lora_for_diffusers(
        trainer.policy.transformer, tmp_path / "lora", cfg.model.lora, trainer.policy.diffusers_pipeline
    )
    plain = lora_policy(tiny_sd3_dir)  # the same adapter on unconverted layers names the same tensors
    reference = export_lora_for_diffusers(
        plain.transformer, tmp_path / "plain", cfg.model.lora, plain.diffusers_pipeline
    )
    weights = "pytorch_lora_weights.safetensors"
    assert set(load_file(exported / weights)) == set(load_file(reference / weights))
    pipe = diffusers.StableDiffusion3Pipeline.from_pretrained(tiny_sd3_dir)
    pipe.load_lora_weights(exported)
    loaded = adapter_tensors(pipe.transformer)
    trained = adapter_tensors(trainer.policy.transformer)
    assert loaded.keys() == trained.keys() and loaded
    assert all(torch.equal(loaded[name], trained[name].to(loaded[name].dtype)) for name in loaded)


def adapter_tensors(transformer: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The LoRA matrices by layer (the adapter's name dropped: peft's `default`, diffusers' `default_0`)."""
    return {
        re.sub(r"\.(lora_[AB])\.[^.]+\.", r".\1.", name): p.detach()
        for name, p in transformer.named_parameters()
        if ".lora_A." in name or ".lora_B." in name
    }


def test_full_finetune_with_float8_trains_at_parity_zero(tiny_sd3_dir, tmp_path):
    """A full fine-tune: the converted layers' own weights are the trained float32 masters (with
    the rowwise recipe, so each accepted model.float8 value trains somewhere on the CPU)."""
    full = (
        "model.float8=rowwise",
        "model.train_mode=full",
        "actor.ema.enabled=false",
        "eval.use_ema=false",
        "actor.lr=1e-4",
    )
    overrides = ("trainer.num_steps=1", "trainer.save_every=0", "eval.every=0", "eval.at_start=false")
    trainer = Trainer(load_config(RECIPE, tiny_overrides(tiny_sd3_dir, tmp_path, *FLOAT8, *full, *overrides)))
    converted = {name for name, m in trainer.policy.transformer.named_modules() if type(m).__name__ == "Float8Linear"}
    assert converted and all(f"{name}.weight" in trainer.parameters for name in converted)
    initial = {name: p.detach().clone() for name, p in trainer.parameters.items()}
    trainer.train()
    row = read_rows(tmp_path / "metrics.csv")[0]
    assert float(row["parity_max_abs_log_prob_diff"]) == 0.0
    moved = {name for name, p in trainer.parameters.items() if not torch.equal(initial[name], p.detach())}
    assert any(f"{name}.weight" in moved for name in converted)
    assert all(torch.isfinite(p).all() and p.dtype == torch.float32 for p in trainer.parameters.values())


GPU_FLOAT8 = pytest.mark.skipif(
    not torch.cuda.is_available() or torch.cuda.get_device_capability() < FLOAT8_CAPABILITY,
    reason="needs a CUDA GPU with float8 matmuls (compute capability 8.9+)",
)


@pytest.mark.gpu
@GPU_FLOAT8
@pytest.mark.parametrize("recipe", ["tensorwise", "rowwise"])
def test_float8_on_a_gpu_trains_at_parity_zero(tiny_sd3_dir, tmp_path, recipe):
    """torch._scaled_mm itself (no emulation), eager, in bf16: one LoRA step at parity 0."""
    extra = ("model.device=cuda", "model.dtype=bfloat16", f"model.float8={recipe}", "trainer.num_steps=1")
    overrides = (*extra, "trainer.save_every=0", "eval.every=0", "eval.at_start=false")
    trainer = Trainer(load_config(RECIPE, tiny_overrides(tiny_sd3_dir, tmp_path, *overrides)))
    assert sum(type(m).__name__ == "Float8Linear" for m in trainer.policy.transformer.modules()) > 0
    trainer.train()
    row = read_rows(tmp_path / "metrics.csv")[0]
    assert float(row["parity_max_abs_log_prob_diff"]) == 0.0
    assert torch.isfinite(torch.tensor(float(row["loss"])))


@pytest.mark.parametrize(
    "extra,message",
    [
        (("model.dtype=float32",), "model.float8=tensorwise needs model.dtype=bfloat16 (got float32)"),
        (("model.dtype=float16",), "model.float8=tensorwise needs model.dtype=bfloat16 (got float16)"),
        (("model.float8_emulate=false",), "model.float8=tensorwise is for float8 tensor cores"),
        (("distributed.training.strategy=fsdp2",), "distributed.training.strategy=fsdp2 is not supported yet"),
    ],
)
def test_float8_refusals_name_the_keys(tiny_sd3_dir, tmp_path, extra, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)").replace(".", r"\.")):
        load_config(RECIPE, tiny_overrides(tiny_sd3_dir, tmp_path, *FLOAT8, *extra))


def test_emulate_without_float8_is_refused(tiny_sd3_dir, tmp_path):
    with pytest.raises(ConfigError, match="model.float8_emulate=true has nothing to emulate"):
        load_config(RECIPE, tiny_overrides(tiny_sd3_dir, tmp_path, "model.float8_emulate=true"))


def test_missing_torchao_names_the_extra(tiny_sd3_dir, tmp_path, monkeypatch):
    import genalign.config.extras as extras

    monkeypatch.setattr(extras, "is_installed", lambda module: module != "torchao")
    with pytest.raises(ConfigError, match=r"model\.float8 needs the torchao package.*genalign\[float8\]"):
        load_config(RECIPE, tiny_overrides(tiny_sd3_dir, tmp_path, *FLOAT8))
