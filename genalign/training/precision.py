"""Mixed precision of the trained weights: float32 masters, compute in `model.dtype`.

Where it fits: `setup.build_policy` calls `make_master_weights` once the adapter is attached
(or the model is unfrozen for a full fine-tune); the trainer builds the `GradScaler` next to
the optimizer and hands both to `update.run_update`; the denoiser itself runs under
`models.base.compute_precision` (autocast), so rollout and replay share one compute path and
the parity preflight stays exact. With `model.float8` it then swaps the denoiser's linear layers
for torchao's float8 ones (`convert_to_float8`), which keep these masters as their weights.

Why masters: AdamW on bf16/fp16 parameters loses the update (eps 1e-8 rounds to 0 in fp16,
lr·update underflows against the weight in bf16) and, at LoRA init (B = 0, so ∂A = 0), divides
0 by 0. Why a scaler for fp16 only: fp16's 5 exponent bits flush small gradients to 0; bf16
has float32's range and needs none (the usual torch.amp recipe).
"""

from __future__ import annotations

import dataclasses
import logging

import torch

log = logging.getLogger(__name__)


def make_master_weights(module: torch.nn.Module) -> int:
    """Cast every trainable parameter of `module` to float32 in place (frozen base weights
    keep the compute dtype); returns how many were cast.

    peft casts a LoRA layer's input to the adapter's dtype before its matmuls; under autocast
    that would only add an fp32 round trip of the activations, so it is switched off here."""
    cast = 0
    for param in module.parameters():
        if param.requires_grad and param.dtype != torch.float32:
            param.data = param.data.float()
            cast += 1
    for layer in module.modules():
        if hasattr(layer, "cast_input_dtype_enabled"):
            layer.cast_input_dtype_enabled = False
    return cast


def build_grad_scaler(dtype: torch.dtype, device: torch.device, distributed: bool = False) -> torch.amp.GradScaler:
    """Dynamic loss scaling for float16 compute; a disabled (pass-through) scaler otherwise.

    Under torchrun the sharded scaler (torch's, for DDP and FSDP): it all-reduces the inf/nan
    flag after unscaling, so a non-finite gradient shard on one rank skips the step, and
    lowers the scale, on every rank (FSDP2 ranks hold different gradient shards)."""
    enabled = dtype == torch.float16
    if distributed:
        from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler

        return ShardedGradScaler(device.type, enabled=enabled)
    return torch.amp.GradScaler(device.type, enabled=enabled)


def configure_backends(allow_tf32: bool) -> None:
    """Process-wide matmul precision: TF32 for float32 matmuls on CUDA (`model.allow_tf32`)."""
    if torch.cuda.is_available():
        torch.backends.cuda.matmul.allow_tf32 = allow_tf32
        torch.backends.cudnn.allow_tf32 = allow_tf32


def compile_denoiser(module: torch.nn.Module, mode: str, repeated_blocks: tuple[str, ...]) -> int:
    """`model.compile`: torch.compile in place; returns how many modules were compiled.

    "regional" compiles each repeated block (one graph per distinct block shape, reused by
    every instance: minutes less than compiling the whole model, the same steady speed);
    "full" compiles the whole denoiser. Rollout (no grad), replay (grad), the reference pass
    (adapter off) and evaluation (another batch size) each specialise the graphs, so the
    recompile limit is raised above dynamo's default of 8."""
    import torch._dynamo

    torch._dynamo.config.cache_size_limit = max(torch._dynamo.config.cache_size_limit, 64)
    if mode == "full":
        module.compile()
        return 1
    if mode != "regional":
        raise ValueError(f"model.compile_mode={mode!r}: choose regional or full")
    blocks = [m for m in module.modules() if type(m).__name__ in repeated_blocks]
    if not blocks:
        raise ValueError(
            f"model.compile_mode=regional: the denoiser {type(module).__name__} has no block of "
            f"{list(repeated_blocks)}; use model.compile_mode=full"
        )
    for block in blocks:
        block.compile()
    return len(blocks)


FLOAT8_DIM_MULTIPLE = 16
"""torch._scaled_mm's shape rule: a float8 matmul's weight has both dims multiples of 16."""
LORA_ADAPTER_PARTS = ("lora_A", "lora_B")
"""peft's names for a LoRA layer's down/up projections (nn.Linear inside a ModuleDict)."""


def float8_layer_filter(layer: torch.nn.Module, name: str) -> bool:
    """Whether `convert_to_float8` converts this nn.Linear (`name`: its path in the denoiser).

    Not LoRA's A/B: their rank-r dim (4 to 64) makes float8 matmuls slower than bf16 ones (the
    casts cost more than the small matmul saves) and a trained adapter loses most to float8's
    rounding; peft's frozen `base_layer` beside them is converted like any other linear. Not a
    layer with a dim that is no multiple of 16: torch._scaled_mm refuses it."""
    if any(part in LORA_ADAPTER_PARTS for part in name.split(".")):
        return False
    out_features, in_features = layer.weight.shape
    return out_features % FLOAT8_DIM_MULTIPLE == 0 and in_features % FLOAT8_DIM_MULTIPLE == 0


def convert_to_float8(module: torch.nn.Module, recipe: str, emulate: bool) -> int:
    """`model.float8`: swap `module`'s nn.Linear layers that `float8_layer_filter` accepts for
    torchao's Float8Linear, in place; returns how many were swapped.

    A Float8Linear keeps the layer's own `weight` and `bias` parameters (the same tensors: the
    float32 masters of `make_master_weights` stay what the optimizer steps, and state-dict names
    do not change) and casts the matmul's inputs to float8 with dynamic scales on each call;
    `emulate` (model.float8_emulate) does the casts but multiplies the dequantised values in
    float32, where no float8 matmul exists.

    `pad_inner_dim`: the weight-gradient matmul's inner dim is the token rows of the call
    (samples x CFG branches x tokens), which torch._scaled_mm needs a multiple of 16 and a
    diffusion transformer seldom gives (SD3: 77 + 128 text tokens); torchao then pads the two
    float8 operands with zeros, which adds nothing to the product."""
    from torchao.float8 import Float8LinearConfig, convert_to_float8_training

    config = dataclasses.replace(Float8LinearConfig.from_recipe_name(recipe), emulate=emulate, pad_inner_dim=True)
    converted: list[str] = []

    def accept(layer: torch.nn.Module, name: str) -> bool:
        if float8_layer_filter(layer, name):
            converted.append(name)
            return True
        return False

    convert_to_float8_training(module, module_filter_fn=accept, config=config)
    return len(converted)
