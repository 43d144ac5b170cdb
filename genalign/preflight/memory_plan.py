"""`MemoryPlan`: each role's per-GPU peak, estimated before anything loads.

Where it fits: beside `RunPlan` (sizes) and `ResourcePlan` (devices). `genalign config` prints
it; the trainer builds it once before the model loads, logs it and refuses a plan over the
GPU's memory (read from the device, or `distributed.resources.gpu_memory_gib` when planning
for another machine) with the config keys that would make it fit.

Inputs: parameter counts from the model's own configs built on the meta device
(`models/architecture.py`); activation bytes per token from the CPU calibration
`benchmarks/calibrate_memory.py` (`models/architectures/calibration.json`), one coefficient
per execution mode: eager (`replay`, CUDA's autocast policy) or `model.compile=true`
(`replay_compiled`: the compiled graph recomputes cheap element-wise ops instead of saving
them). The math is the small pure functions below; docs/memory_plan.md states the model and
how close it came to the one GPU measurement.

What is not counted: the CUDA context and allocator fragmentation (about 1 GiB and a few
percent), the VAE decode's working set, reward models (their own runtime places them), the
text encoders' forward (they run once per step on a few prompts), and backward's transient
gradients of one block.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from genalign.config.errors import ConfigError

GIB = 2 ** 30
DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}
MASTER_BYTES = 4
"""Trained weights are float32 masters whatever model.dtype says."""
ADAMW_STATE_BYTES = 8
"""exp_avg + exp_avg_sq, float32."""
MASTERS = "trainable masters + grads (fp32)"
TEXT_ENCODER = "text_encoder"
"""Pipeline components named text_encoder, text_encoder_2, ... (model.offload_text_encoders parks them)."""
CALIBRATION = Path(__file__).resolve().parents[1] / "models" / "architectures" / "calibration.json"
CALIBRATION_BYTES = 2
"""The calibration's coefficients are at bfloat16 compute; other dtypes scale by bytes."""
FLOAT32_COMPONENTS = ("vae", "vqmodel")
"""Decoders that always run in float32 (the diffusion families' VAE, Janus-Pro's VQ model)."""


# ---------------------------------------------------------------- pure math
def weight_bytes(parameters: int, dtype_bytes: int) -> float:
    return float(parameters * dtype_bytes)


def trainable_state_bytes(parameters: int, ema: bool, copies: int) -> dict[str, float]:
    """Per trained parameter: float32 master and gradient, AdamW's two moments, EMA and the
    algorithm's float32 copies."""
    out = {MASTERS: float(parameters * 2 * MASTER_BYTES),
           "AdamW state (fp32)": float(parameters * ADAMW_STATE_BYTES)}
    if ema:
        out["EMA (fp32)"] = float(parameters * MASTER_BYTES)
    if copies:
        out["algorithm copy (fp32: NFT's old policy, DPO's reference)"] = float(copies * parameters * MASTER_BYTES)
    return out


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


def replay_activation_bytes(rows: int, tokens: int, layers: int, hidden: int, dtype_bytes: int,
                            per_unit: float, checkpointed_per_unit: float, checkpointing: bool) -> float:
    """Bytes autograd keeps over one replay forward: rows x tokens x blocks x width x the
    calibrated bytes per unit; with gradient checkpointing, the blocks' checkpointed inputs
    plus one block recomputed in backward."""
    scale = dtype_bytes / CALIBRATION_BYTES
    per_block = rows * tokens * hidden * scale
    if checkpointing:
        return per_block * (layers * checkpointed_per_unit + per_unit)
    return per_block * layers * per_unit


def rollout_working_bytes(rows: int, tokens: int, hidden: int, dtype_bytes: int, per_unit: float) -> float:
    """The peak working set of a no-grad forward over `rows` (CFG: both branches)."""
    return rows * tokens * hidden * per_unit * dtype_bytes / CALIBRATION_BYTES


def kv_cache_bytes(rows: int, tokens: int, layers: int, kv_heads: int, head_dim: int, dtype_bytes: int) -> float:
    """A token rollout's key-value cache at its longest: keys and values (2) x layers x
    key-value heads x head dim x tokens (prompt + image) x rows (CFG: both streams) x bytes."""
    return float(2 * layers * kv_heads * head_dim * tokens * rows * dtype_bytes)


def trajectory_bytes(samples: int, steps: int, latent_elements: int, pixels: int) -> float:
    """Host bytes of a step's trajectories: float32 latents x_0..x_T, log-probs, uint8 media."""
    return float(samples * ((steps + 1) * latent_elements * 4 + steps * 4 + 3 * pixels))


def prompt_embedding_bytes(rows: int, text_tokens: int, text_width: int, dtype_bytes: int) -> float:
    """Host bytes of stored prompt embeddings: one [text_tokens, text_width] per stored row
    (trajectories keep each distinct prompt once and the CFG negative once: `SharedCondition`)."""
    return float(rows * text_tokens * text_width * dtype_bytes)


def shard(total: float, ranks: int) -> float:
    return total / max(ranks, 1)


def larger(*phases: tuple[str, float]) -> tuple[str, float]:
    """The phase line that sets the peak: phases that never overlap (sampling, replay,
    encoding prompts with parked text encoders) share the memory above the resident lines."""
    return max(phases, key=lambda line: line[1])


# ---------------------------------------------------------------- the plan
@dataclass(frozen=True)
class Role:
    name: str
    lines: tuple[tuple[str, float], ...]
    """(what, bytes) resident at this role's peak, per GPU."""

    @property
    def peak_bytes(self) -> float:
        return sum(b for _, b in self.lines)


@dataclass(frozen=True)
class MemoryPlan:
    roles: tuple[Role, ...]
    host: tuple[tuple[str, float], ...]
    """(what, bytes) the trainer process keeps in host memory per step."""
    gpu_memory_bytes: float | None
    gpu_memory_source: str
    source: str
    """Where the parameter counts came from."""
    levers: tuple[str, ...]
    """Config changes that lower the peak, for the error."""
    activations: str = CALIBRATION.name
    """Where the activation coefficients came from (the calibration's `measured_on`)."""

    def describe(self) -> str:
        lines = [f"memory plan (parameter counts: {self.source}; activations: {self.activations}):"]
        for role in self.roles:
            lines.append(f"  {role.name}: peak ~{role.peak_bytes / GIB:.1f} GiB per GPU")
            lines += [f"    {what}: {value / GIB:.2f} GiB" for what, value in role.lines]
        lines.append("  host memory per step: " + ", ".join(f"{w} {v / GIB:.2f} GiB" for w, v in self.host))
        budget = (f"{self.gpu_memory_bytes / GIB:.1f} GiB ({self.gpu_memory_source})" if self.gpu_memory_bytes
                  else "unknown (no CUDA device; set distributed.resources.gpu_memory_gib to check a plan)")
        lines.append(f"  GPU memory: {budget}")
        return "\n".join(lines)

    def problems(self) -> list[str]:
        if not self.gpu_memory_bytes:
            return []
        over = [r for r in self.roles if r.peak_bytes > self.gpu_memory_bytes]
        return [f"memory plan: {r.name} needs ~{r.peak_bytes / GIB:.1f} GiB per GPU but the GPU has "
                f"{self.gpu_memory_bytes / GIB:.1f} GiB ({self.gpu_memory_source}); levers that lower it: "
                f"{'; '.join(self.levers) or 'none left: use a GPU with more memory'}" for r in over]

    def check(self) -> None:
        problems = self.problems()
        if problems:
            raise ConfigError(problems, hint="genalign config prints the whole plan; docs/memory_plan.md explains it")


def _calibration(family: str) -> dict | None:
    return json.loads(CALIBRATION.read_text())["families"].get(family)


def _gpu_memory(cfg) -> tuple[float | None, str]:
    key = cfg.distributed.resources.gpu_memory_gib
    if key is not None:
        return float(key) * GIB, "distributed.resources.gpu_memory_gib"
    import torch

    if torch.cuda.is_available():
        return float(torch.cuda.get_device_properties(0).total_memory), torch.cuda.get_device_name(0)
    return None, "no CUDA device"


def _trainer_ranks(cfg) -> int:
    if cfg.distributed.training.strategy == "none":
        return 1
    world = os.environ.get("WORLD_SIZE")
    if world:
        return int(world)
    gpus = cfg.distributed.resources.trainer.num_gpus
    return max(1, int(gpus)) if not isinstance(gpus, str) else 1


def _spec(cfg):
    """The model family's `FamilySpec` (what it supports: split CFG, checkpointing, offload)."""
    from genalign.models.spec import family_spec

    return family_spec(cfg.model.family, cfg.model.allow_import)


def _levers(cfg, uses_cfg: bool, ranks: int) -> list[str]:
    """The config changes not yet made that lower a peak."""
    m, levers = cfg.model, []
    if m.train_mode == "full":
        levers.append("model.train_mode=lora")
    if m.dtype == "float32":
        levers.append("model.dtype=bfloat16")
    if not m.compile:
        levers.append("model.compile=true (the compiled graph keeps a fifth to a third fewer replay activations)")
    if not m.gradient_checkpointing and _spec(cfg).gradient_checkpointing:
        levers.append("model.gradient_checkpointing=true")
    micro = cfg.actor.micro_batch_size or cfg.rollout.sample_batch_size
    if micro > 1:
        levers.append(f"actor.micro_batch_size={max(1, micro // 2)} (and rollout.sample_batch_size to match for "
                      "bitwise parity)")
    if uses_cfg and _spec(cfg).split_cfg and not (
            m.cfg_batch == "split" and cfg.algorithm.detach_uncond):
        levers.append("model.cfg_batch=split with algorithm.detach_uncond=true")
    if cfg.actor.ema.enabled:
        levers.append("actor.ema.enabled=false")
    if not m.offload_text_encoders and _spec(cfg).text_encoders:
        levers.append("model.offload_text_encoders=true (on the device only while prompts are encoded)")
    if cfg.distributed.colocated:
        levers.append("/base/distributed=ray_rollout (rollout worker on its own GPU)")
    if cfg.distributed.training.strategy != "fsdp2":
        levers.append("distributed.training.strategy=fsdp2 under torchrun with rollout.engine=local "
                      "(shards the transformer and optimizer state over the ranks)")
    else:
        levers.append(f"more FSDP2 ranks (now {ranks})")
    return levers


def plan_memory(cfg) -> MemoryPlan | None:
    """The plan of a validated config; None for a model no config describes (the toy family,
    a hub id without a shipped architecture file): nothing is checked then."""
    from genalign.algorithms.registry import algorithm_class
    from genalign.preflight.plan import RunPlan
    from genalign.models.architecture import TRANSFORMER, load_architecture, lora_parameters
    m = cfg.model
    arch = load_architecture(m.family, m.path)
    calibration = _calibration(m.family)
    if arch is None or calibration is None:
        return None
    run = RunPlan.from_config(cfg)
    dtype_bytes = DTYPE_BYTES[m.dtype]
    ranks = _trainer_ranks(cfg)
    fsdp = cfg.distributed.training.strategy == "fsdp2"
    transformer = arch.component(TRANSFORMER)
    frozen = [c for c in arch.components if c.name != TRANSFORMER]
    if m.train_mode == "lora":
        targets = m.lora.target_modules or _spec(cfg).policy_class().lora_target_modules
        trained, base = lora_parameters(arch.linear_shapes, targets, m.lora.rank), transformer.parameters
    else:
        trained, base = transformer.parameters, 0
    base_bytes = weight_bytes(base + transformer.buffer_elements, dtype_bytes)
    if fsdp and ranks > 1:  # per-block fully_shard: the rank's shard plus one block gathered at a time
        base_bytes = shard(base_bytes, ranks) + base_bytes / max(arch.num_layers, 1)
    weights = [(f"transformer base weights ({m.dtype}{', FSDP2 shard + 1 block' if fsdp else ''})", base_bytes)] \
        if base else []  # a full fine-tune's transformer is all trained: float32 masters below
    encoders = 0.0  # text encoders parked on the CPU except while prompts are encoded
    for c in frozen:  # the VAE / VQ decoder always computes in float32
        at = 4 if c.name in FLOAT32_COMPONENTS else dtype_bytes
        size = weight_bytes(c.parameters + c.buffer_elements, at)
        if m.offload_text_encoders and c.name.startswith(TEXT_ENCODER):
            encoders += size
        else:
            weights.append((f"{c.name} (frozen, {'float32' if at == 4 else m.dtype})", size))
    algorithm = algorithm_class(cfg)
    state = trainable_state_bytes(trained, cfg.actor.ema.enabled, algorithm.trainable_copies)
    state_lines = [(f"{k}{', FSDP2 shard' if fsdp else ''}", shard(v, ranks) if fsdp else v) for k, v in state.items()]
    if m.train_mode == "full" and algorithm.reference_kind(cfg.algorithm) == "frozen":  # a KL term's frozen copy
        weights.append((f"reference transformer copy ({m.dtype})", weight_bytes(transformer.parameters, dtype_bytes)))

    text_tokens = m.max_sequence_length + arch.geometry.extra_text_tokens
    image_tokens = arch.geometry.image_tokens(cfg.rollout.height, cfg.rollout.width, m.num_frames)
    tokens = tokens_per_row(image_tokens, text_tokens, arch.geometry.text_in_sequence)
    cfg_batch = m.cfg_batch if _spec(cfg).split_cfg else "joint"
    rows = replay_rows(run.train_micro_batch, run.uses_cfg, cfg_batch, cfg.algorithm.detach_uncond)
    mode, per_unit = replay_coefficient(calibration, m.compile)
    activations = replay_activation_bytes(rows, tokens, arch.num_layers, arch.hidden_size, dtype_bytes,
                                          per_unit, calibration["replay_checkpointed"], m.gradient_checkpointing)
    if run.needs_reference:  # the reference's no-grad forward runs while the replay's activations live
        activations += rollout_working_bytes(rows, tokens, arch.hidden_size, dtype_bytes, calibration["rollout_peak"])
    rollout_rows = run.rollout_micro_batch * (2 if run.uses_cfg and cfg_batch == "joint" else 1)
    if arch.geometry.kv_cache:  # token sampling: the cache at its longest + the prompt's prefill forward
        working = (kv_cache_bytes(rollout_rows, tokens, arch.num_layers, arch.kv_heads, arch.head_dim, dtype_bytes)
                   + rollout_working_bytes(rollout_rows, text_tokens, arch.hidden_size, dtype_bytes,
                                           calibration["rollout_peak"]))
    else:
        working = rollout_working_bytes(rollout_rows, tokens, arch.hidden_size, dtype_bytes,
                                        calibration["rollout_peak"])
    act_line = (f"replay activations ({rows} rows x {tokens} tokens, {mode}"
                f"{', checkpointed' if m.gradient_checkpointing else ''}"
                f"{' + the reference forward' if run.needs_reference else ''})", activations)
    roll_line = (f"rollout working set ({rollout_rows} rows x {tokens} tokens"
                 f"{', KV cache' if arch.geometry.kv_cache else ''})", working)
    micro_line = ("replayed micro-batch (latents, condition)",
                  float(run.train_micro_batch * (2 * _latent_elements(arch, cfg) * 4
                                                 + (2 if run.uses_cfg else 1) * text_tokens * arch.text_width
                                                 * dtype_bytes)))
    trainable_weights = ("trainable weights at the worker (fp32)", float(trained * MASTER_BYTES))
    encode_line = ("text encoders while prompts are encoded (on the CPU otherwise)", encoders)
    roles = []
    if cfg.rollout.engine == "local":
        name = f"trainer with in-process rollout (each of {ranks} rank(s))" if ranks > 1 else \
            "trainer with in-process rollout"
        roles.append(Role(name, tuple(weights + state_lines + [micro_line, larger(roll_line, act_line, encode_line)])))
    else:
        trainer = Role("trainer", tuple(weights + state_lines + [micro_line, larger(act_line, encode_line)]))
        worker_weights = [(f"worker's {what}", b) for what, b in weights if "reference" not in what]
        if fsdp and base:
            worker_weights[0] = ("worker's transformer base weights", weight_bytes(base + transformer.buffer_elements,
                                                                                   dtype_bytes))
        worker = worker_weights + [trainable_weights, larger(roll_line, encode_line)]
        if cfg.distributed.colocated:
            # the idle side's modules are on the CPU (rollout/ray_engine.py): the peak is the
            # larger phase, plus the trainer's optimizer state that stays on the device
            resident = [line for line in state_lines if not line[0].startswith(MASTERS)]  # masters park with the module
            rollout_phase = Role("shared GPU, rollout phase (worker active; trainer's modules on CPU)",
                                 tuple(worker + resident))
            roles += [rollout_phase, Role("shared GPU, train phase (trainer active; worker on CPU)",
                                          trainer.lines)]
        else:
            roles += [trainer, Role(f"rollout worker (each of {cfg.rollout.num_workers})", tuple(worker))]
    samples = run.samples_per_step
    pixels = cfg.rollout.height * cfg.rollout.width * m.num_frames
    embedding_rows = run.prompts_per_step + (1 if run.uses_cfg else 0)  # SharedCondition: distinct prompts + 1 negative
    host = (("trajectories", trajectory_bytes(samples, cfg.rollout.num_steps, _latent_elements(arch, cfg), pixels)),
            ("prompt embeddings", prompt_embedding_bytes(embedding_rows, text_tokens, arch.text_width, dtype_bytes)))
    memory, memory_source = _gpu_memory(cfg)
    return MemoryPlan(tuple(roles), host, memory, memory_source, arch.source, tuple(_levers(cfg, run.uses_cfg, ranks)),
                      f"{CALIBRATION.name}, {calibration['measured_on']}")


def _latent_elements(arch, cfg) -> int:
    """Latent elements of one sample: the transformer's image tokens x patch volume x the VAE's channels."""
    pt, ph, pw = arch.geometry.patch
    tokens = arch.geometry.image_tokens(cfg.rollout.height, cfg.rollout.width, cfg.model.num_frames)
    return tokens * pt * ph * pw * arch.latent_channels
