"""`model.float8` against the rest of the config and this machine, before any model loads.

Where it fits: `validate` calls `float8_problems`; `ModelConfig.float8_problems` holds the rules
inside model.* (the compute dtype). What is here reads another block (the training strategy)
or the machine (the torchao package, the device's float8 matmuls). The conversion itself is
`training/precision.py:convert_to_float8`, called once by `setup.build_policy`.
"""

from __future__ import annotations

from genalign.config.extras import missing_package_problem
from genalign.config.schema import ExperimentConfig

FLOAT8_CAPABILITY = (8, 9)
"""The first CUDA compute capability with float8 tensor cores (Ada; Hopper is 9.0), which
torch._scaled_mm needs."""


def float8_problems(cfg: ExperimentConfig, check_machine: bool) -> list[str]:
    """Why this run cannot train with `model.float8` (empty when it can, or when it is "none")."""
    model = cfg.model
    if model.float8 == "none":
        return []
    problems = []
    if cfg.distributed.training.strategy == "fsdp2":
        # torchao supports FSDP2 (optionally all-gathering weights in float8), but genalign's FSDP2
        # wrapping has not been run with converted layers: refused rather than assumed to work
        problems.append(
            f"model.float8={model.float8} with distributed.training.strategy=fsdp2 is not supported yet "
            "(float8 layers under genalign's FSDP2 sharding are untested); use strategy=ddp or none, "
            "or model.float8=none"
        )
    if not check_machine:
        return problems
    missing = missing_package_problem("model.float8", "torchao", "float8", "or set model.float8=none")
    if missing:
        return [*problems, missing]
    if not model.float8_emulate:
        problems += _device_problems(model.device, model.float8)
    return problems


def _device_problems(device_name: str, recipe: str) -> list[str]:
    """model.device must have float8 tensor cores; the way out on a machine without them is
    explicit. (torch 2.13 also multiplies float8 on a CPU, without float8 hardware: nothing to
    gain there, and not the kernels a GPU run uses, so a CPU is refused like an older GPU.)"""
    import torch  # only when float8 is asked for: validating a config imports no torch otherwise

    if device_name == "auto":
        device_name = "cuda" if torch.cuda.is_available() else "cpu"
    device = torch.device(device_name)
    if device.type == "cuda" and torch.cuda.is_available():
        capability = torch.cuda.get_device_capability(device)
        if capability >= FLOAT8_CAPABILITY:
            return []
        where = f"{torch.cuda.get_device_name(device)} (compute capability {capability[0]}.{capability[1]})"
    elif device.type == "cuda":
        return []  # no CUDA here at all: model.device's own check says so
    else:
        where = f"model.device={device.type}"
    return [
        f"model.float8={recipe} is for float8 tensor cores (a CUDA GPU of compute capability 8.9 or later: "
        f"Ada, Hopper, Blackwell); {where} has none. Set model.float8=none, or model.float8_emulate=true to "
        "emulate them (the same rounding, float32 matmuls: for tests, no speedup)"
    ]
