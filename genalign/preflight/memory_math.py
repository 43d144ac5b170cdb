"""The memory plan's pure math: bytes of each line from sizes, with the constants it states.

Where it fits: `memory_terms.py` turns a config into these functions' arguments and
`memory_plan.py` adds the lines up per role; docs/memory_plan.md explains each term.
"""

from __future__ import annotations

Line = tuple[str, float]
"""(what, bytes) of one plan line."""
GIB = 2**30
DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}
MASTER_BYTES = 4
"""Trained weights are float32 masters whatever model.dtype says."""
ADAMW_STATE_BYTES = 8
"""exp_avg + exp_avg_sq, float32."""
ADAMW_TEMPORARY_BYTES = 4
"""torch.optim.AdamW on CUDA defaults to its foreach implementation (`_multi_tensor_adam`,
torch/optim/adam.py). With decoupled weight decay (applied in place), no maximize, amsgrad or
capturable and a float beta2, its one parameter-sized intermediate is `exp_avg_sq_sqrt =
torch._foreach_sqrt(exp_avg_sqs)`: float32 like the state, alive until `_foreach_addcdiv_`
has updated the parameters."""
ALLOCATOR_HEADROOM = 0.10
"""The caching allocator reserves more than the live tensors hold (blocks split and rounded,
freed blocks of the wrong size): a stated 10 % over the planned tensors, not measured here."""
CUDA_CONTEXT_BYTES = 1.0 * GIB
"""The CUDA context, kernels and library workspaces (cuBLAS, cuDNN), outside the allocator: a
stated 1 GiB, not measured here."""
MASTERS = "trainable masters + grads (fp32)"
TEXT_ENCODER = "text_encoder"
"""Pipeline components named text_encoder, text_encoder_2, ... (model.offload_text_encoders parks them)."""
CALIBRATION_BYTES = 2
"""The calibration's coefficients are at bfloat16 compute; other dtypes scale by bytes."""
FLOAT32_COMPONENTS = ("vae", "vqmodel")
"""Decoders that always run in float32 (the diffusion families' VAE, Janus-Pro's VQ model)."""


def weight_bytes(parameters: int, dtype_bytes: int) -> float:
    return float(parameters * dtype_bytes)


def trainable_state_bytes(parameters: int, ema: bool, copies: int) -> dict[str, float]:
    """Per trained parameter: float32 master and gradient, AdamW's two moments, EMA and the
    algorithm's float32 copies."""
    out = {MASTERS: float(parameters * 2 * MASTER_BYTES), "AdamW state (fp32)": float(parameters * ADAMW_STATE_BYTES)}
    if ema:
        out["EMA (fp32)"] = float(parameters * MASTER_BYTES)
    if copies:
        out["algorithm copy (fp32: NFT's old policy, AWM's anchor, DPO's reference)"] = float(
            copies * parameters * MASTER_BYTES
        )
    return out


def autocast_cache_bytes(trained: int, dtype_bytes: int) -> float:
    """Autocast's casts of the float32 trained weights to the compute dtype: its cache keeps
    every cast of a leaf that requires grad until the autocast region ends, and autograd keeps
    them for backward, so a forward ends holding the whole trained set once more (under FSDP2
    too: the casts are of the gathered blocks). None at float32 compute."""
    return 0.0 if dtype_bytes == MASTER_BYTES else float(trained * dtype_bytes)


def adamw_temporary_bytes(trained: int) -> float:
    """The optimizer step's parameter-sized float32 temporary (`ADAMW_TEMPORARY_BYTES`)."""
    return float(trained * ADAMW_TEMPORARY_BYTES)


def tokens_per_row(image_tokens: int, text_tokens: int, text_in_sequence: bool) -> int:
    """Transformer tokens of one sample: image tokens, plus text tokens under joint attention."""
    return image_tokens + (text_tokens if text_in_sequence else 0)


def replay_rows(micro_batch: int, cfg: bool, cfg_batch: str, detach_uncond: bool) -> int:
    """Rows whose activations backward keeps: CFG doubles the batch, except the split form with
    a detached unconditional branch (that one runs without autograd)."""
    if not cfg:
        return micro_batch
    return micro_batch if (cfg_batch == "split" and detach_uncond) else 2 * micro_batch


def replay_coefficient(calibration: dict, compiled: bool) -> tuple[str, float]:
    """(mode, bytes per token per block per unit kept for backward) of the run's execution mode:
    `model.compile=true` keeps what the compiled graph saves, eager what eager kernels save."""
    return ("compiled", calibration["replay_compiled"]) if compiled else ("eager", calibration["replay"])


def replay_activation_bytes(
    rows: int,
    tokens: int,
    layers: int,
    hidden: int,
    dtype_bytes: int,
    per_unit: float,
    checkpointed_per_unit: float,
    checkpointing: bool,
) -> float:
    """Bytes autograd keeps over one replay forward: rows x tokens x blocks x width x the
    calibrated bytes per unit; with gradient checkpointing, the blocks' checkpointed inputs
    plus one block recomputed in backward."""
    scale = dtype_bytes / CALIBRATION_BYTES
    per_block = rows * tokens * hidden * scale
    if checkpointing:
        return per_block * (layers * checkpointed_per_unit + per_unit)
    return per_block * layers * per_unit


def outside_blocks_bytes(rows: int, image_tokens: int, dtype_bytes: int, per_image_token: float) -> float:
    """Bytes autograd keeps per image token outside the repeated blocks, counted once per token
    rather than per block (calibration `replay_outside_blocks`: NextStep-1's flow head walking
    each token through its head steps; 0 for a family that folds these terms into the blocks')."""
    return rows * image_tokens * per_image_token * dtype_bytes / CALIBRATION_BYTES


def outside_blocks_step_scale(num_steps: int, calibrated_num_steps: int | None) -> float:
    """The factor on the calibration's per-image-token bytes for a run walking `num_steps` head
    σ's: replay keeps every stochastic step of the walk, num_steps − 1 (the last step is
    deterministic), so (num_steps − 1) / (calibrated − 1); 1 when the calibration names no step
    count (a term that does not grow with the walk)."""
    if calibrated_num_steps is None:
        return 1.0
    return (num_steps - 1) / (calibrated_num_steps - 1)


def chain_activation_bytes(forward_bytes: float, forwards: int, chain_checkpointed: bool, input_bytes: float) -> float:
    """Autograd's hold over a chain of `forwards` denoiser forwards back-propagated together
    (reward feedback: the last K sampling steps). Kept whole, every forward's activations
    (`forward_bytes` each) live until the backward; checkpointed per step, only each step's
    input (`input_bytes`: the rows' latents) is kept and one forward is recomputed at a time."""
    if chain_checkpointed:
        return forward_bytes + forwards * input_bytes
    return forwards * forward_bytes


def rollout_working_bytes(rows: int, tokens: int, hidden: int, dtype_bytes: int, per_unit: float) -> float:
    """The peak working set of a no-grad forward over `rows` (CFG: both branches)."""
    return rows * tokens * hidden * per_unit * dtype_bytes / CALIBRATION_BYTES


def kv_cache_bytes(rows: int, tokens: int, layers: int, kv_heads: int, head_dim: int, dtype_bytes: int) -> float:
    """A token rollout's key-value cache at its longest: keys and values (2) x layers x
    key-value heads x head dim x tokens (prompt + image) x rows (CFG: both streams) x bytes."""
    return float(2 * layers * kv_heads * head_dim * tokens * rows * dtype_bytes)


def trajectory_bytes(samples: int, steps: int, latent_elements: int, pixels: int, means: bool = False) -> float:
    """Host bytes of a step's trajectories: float32 latents x_0..x_T, log-probs, uint8 media, and
    with `means` the float32 kernel means μ_0..μ_{T-1} (an algorithm's `needs_rollout_means`)."""
    latents = steps + 1 + (steps if means else 0)
    return float(samples * (latents * latent_elements * 4 + steps * 4 + 3 * pixels))


def prompt_embedding_bytes(rows: int, text_tokens: int, text_width: int, dtype_bytes: int) -> float:
    """Host bytes of stored prompt embeddings: one [text_tokens, text_width] per stored row
    (trajectories keep each distinct prompt once and the CFG negative once: `SharedCondition`)."""
    return float(rows * text_tokens * text_width * dtype_bytes)


def shard(total: float, ranks: int) -> float:
    return total / max(ranks, 1)


def device_overhead(allocated: float) -> tuple[Line, Line]:
    """What the GPU holds beyond the planned tensors: the allocator's headroom over them and
    the CUDA context."""
    return (
        (f"allocator headroom ({ALLOCATOR_HEADROOM:.0%} of the tensors)", allocated * ALLOCATOR_HEADROOM),
        ("CUDA context and library workspaces", CUDA_CONTEXT_BYTES),
    )
