"""LoRA helpers on a plain torch module (no diffusers): adapter placement, freezing,
reference mode, strict trainable-state loading and fingerprints."""

from __future__ import annotations

from typing import get_args

import pytest
import torch

from genalign.models.config import LoraConfig, LoraInit
from genalign.weights.lora import (
    LORA_INITS,
    apply_lora,
    export_lora_for_diffusers,
    freeze_for_full_finetune,
    load_trainable_state_dict,
    reference_mode,
    state_fingerprint,
    trainable_parameters,
    trainable_state_dict,
)


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.to_q = torch.nn.Linear(6, 6)
        self.to_out = torch.nn.Sequential(torch.nn.Linear(6, 6))


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.blocks = torch.nn.ModuleList([Block(), Block()])
        self.head = torch.nn.Linear(6, 3)

    def forward(self, x):
        for block in self.blocks:
            x = torch.tanh(block.to_out(block.to_q(x)))
        return self.head(x)


TARGETS = ["to_q", "to_out.0"]
INPUT = torch.randn(5, 6, generator=torch.Generator().manual_seed(1))


def lora_net(rank=2, alpha=4.0, init="gaussian") -> Net:
    net = Net()
    apply_lora(net, LoraConfig(rank=rank, alpha=alpha, init=init), TARGETS)
    return net


def perturb_lora(net: Net, seed: int = 2) -> None:
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in net.named_parameters():
            if "lora_" in name:
                param.add_(torch.randn(param.shape, generator=generator))


@pytest.mark.parametrize("init", ["gaussian", "default"])
def test_only_lora_trains_and_output_is_unchanged_at_init(init):
    base = Net()(INPUT)
    net = lora_net(init=init)
    names = {name for name, p in net.named_parameters() if p.requires_grad}
    # 4 targeted Linear layers (to_q and to_out.0 in 2 blocks), each with lora_A and lora_B
    assert len(names) == 8 and all(".lora_A." in n or ".lora_B." in n for n in names)
    assert not any("head" in n for n in names)
    assert torch.equal(net(INPUT), base)  # B = 0 at init: the adapter adds exactly zero


def test_family_default_targets_are_used_unless_the_config_names_some():
    net = Net()
    apply_lora(net, LoraConfig(rank=2, alpha=2.0, target_modules=["head"]), TARGETS)
    assert {n.split(".lora_")[0] for n, p in net.named_parameters() if p.requires_grad} == {"head"}


def test_a_target_that_matches_nothing_is_an_error_naming_it():
    with pytest.raises(ValueError, match=r"model.lora.target_modules: \['attn.to_k'\]"):
        apply_lora(Net(), LoraConfig(rank=2, target_modules=["to_q", "attn.to_k"]), TARGETS)


def test_unknown_init_and_double_application_are_errors():
    with pytest.raises(ValueError, match="model.lora.init='pissa_typo'"):
        apply_lora(Net(), LoraConfig(init="pissa_typo"), TARGETS)
    net = lora_net()
    with pytest.raises(ValueError, match="already carries"):
        apply_lora(net, LoraConfig(rank=2), TARGETS)


def test_full_finetune_trains_everything():
    net = Net()
    net.requires_grad_(False)
    freeze_for_full_finetune(net)
    assert len(trainable_parameters(net)) == len(list(net.parameters())) == 10  # 5 Linear x (weight, bias)


def test_reference_mode_gives_base_output_and_restores_even_on_error():
    base = Net()(INPUT)
    net = lora_net()
    perturb_lora(net)
    tuned = net(INPUT)
    assert not torch.allclose(tuned, base)
    with reference_mode(net):
        torch.testing.assert_close(net(INPUT), base, rtol=0, atol=0)
        with reference_mode(net):  # nested: the inner exit must not re-enable the adapter early
            pass
        torch.testing.assert_close(net(INPUT), base, rtol=0, atol=0)
    torch.testing.assert_close(net(INPUT), tuned, rtol=0, atol=0)
    with pytest.raises(RuntimeError, match="boom"):
        with reference_mode(net):
            raise RuntimeError("boom")
    torch.testing.assert_close(net(INPUT), tuned, rtol=0, atol=0)
    assert len(trainable_parameters(net)) == 8  # requires_grad restored with the adapter


def test_reference_mode_without_adapter_is_an_error():
    with pytest.raises(ValueError, match="model.train_mode=lora"):
        with reference_mode(Net()):
            pass


def test_trainable_state_is_a_detached_cpu_clone_and_round_trips():
    net = lora_net()
    perturb_lora(net)
    state = trainable_state_dict(net)
    before = net(INPUT)
    fingerprint = state_fingerprint(state)
    for tensor in state.values():
        assert tensor.device.type == "cpu" and not tensor.requires_grad
    next(iter(state.values())).add_(1.0)  # editing the copy leaves the model alone
    torch.testing.assert_close(net(INPUT), before, rtol=0, atol=0)
    assert state_fingerprint(state) != fingerprint

    other = lora_net()  # same architecture, B = 0
    load_trainable_state_dict(other, trainable_state_dict(net))
    torch.testing.assert_close(other(INPUT), before, rtol=0, atol=0)
    assert state_fingerprint(trainable_state_dict(other)) == fingerprint


def test_fingerprint_sees_names_values_dtypes_and_scalars():
    state = {"a": torch.tensor([1.0, 2.0]), "b": torch.tensor(3.0)}
    reference = state_fingerprint(state)
    assert state_fingerprint(dict(reversed(list(state.items())))) == reference  # order-free
    assert state_fingerprint({"a": state["a"], "c": state["b"]}) != reference
    assert state_fingerprint({"a": torch.tensor([1.0, 2.0 + 1e-6]), "b": state["b"]}) != reference
    assert state_fingerprint({"a": state["a"].double(), "b": state["b"]}) != reference
    assert state_fingerprint({"a": state["a"].bfloat16(), "b": state["b"]}) != reference


def test_strict_load_lists_missing_unexpected_and_mis_shaped_names():
    net = lora_net()
    state = trainable_state_dict(net)
    missing_name = sorted(state)[0]
    missing = {k: v for k, v in state.items() if k != missing_name}
    with pytest.raises(ValueError, match=rf"1 missing \['{missing_name}'\]"):
        load_trainable_state_dict(net, missing)
    with pytest.raises(ValueError, match=r"1 unexpected \['head.weight'\]"):
        load_trainable_state_dict(net, {**state, "head.weight": torch.zeros(3, 6)})
    with pytest.raises(ValueError, match=r"1 shape mismatches .*model \(2, 6\) vs state \(3, 6\)"):
        load_trainable_state_dict(net, {**state, missing_name: torch.zeros(3, 6)})
    with pytest.raises(ValueError, match="8 shape mismatches"):  # a rank-2 state into a rank-4 adapter
        load_trainable_state_dict(lora_net(rank=4), state)


def test_export_without_adapter_is_an_error(tmp_path):
    with pytest.raises(ValueError, match="model.train_mode=lora"):
        export_lora_for_diffusers(Net(), tmp_path, LoraConfig())


def test_every_lora_init_choice_maps_to_a_peft_value():
    # model.lora.init's `LoraInit` Literal is what the loader accepts; each needs peft's value
    assert list(LORA_INITS) == list(get_args(LoraInit))


def test_merged_state_is_the_base_layout_with_w_plus_scaling_b_a():
    """`merged_state_dict`: the un-adapted names (what the base checkpoint's loader reads) with
    W' = W + (alpha / r)·B A from the given trained tensors (here not the module's own: an EMA),
    so a plain module loading it strictly computes what the adapted one would with them."""
    from torch import nn

    from genalign.weights.lora import merged_state_dict

    torch.manual_seed(0)
    module = nn.Sequential(nn.Linear(4, 5), nn.ReLU(), nn.Linear(5, 3))
    base = {name: tensor.clone() for name, tensor in module.state_dict().items()}
    apply_lora(module, LoraConfig(rank=2, alpha=6.0, target_modules=["0"]), [])
    trained = {name: torch.randn(p.shape) for name, p in module.named_parameters() if p.requires_grad}
    merged = merged_state_dict(module, trained)
    assert set(merged) == set(base)
    a, b = trained["0.lora_A.default.weight"], trained["0.lora_B.default.weight"]
    torch.testing.assert_close(merged["0.weight"], base["0.weight"] + 3.0 * b @ a, rtol=0, atol=1e-6)
    assert torch.equal(merged["2.weight"], base["2.weight"]) and torch.equal(merged["0.bias"], base["0.bias"])
    plain = nn.Sequential(nn.Linear(4, 5), nn.ReLU(), nn.Linear(5, 3))
    plain.load_state_dict(merged, strict=True)
    load_trainable_state_dict(module, trained)
    x = torch.randn(7, 4)
    # one fp32 product in another order, on values of order 1: ~1e-6
    torch.testing.assert_close(plain(x), module(x), rtol=1e-5, atol=1e-5)
