"""The memory plan: `MemoryEstimate`, each role's per-GPU peak, estimated before anything loads.

Where it fits: beside `StepSizes` (sizes) and `Placement` (devices). `genalign config` prints
it; the trainer builds it once before the model loads, logs it and refuses a plan above
`distributed.resources.gpu_memory_fraction` of the GPU's memory (read from the device, or
`distributed.resources.gpu_memory_gib` when planning for another machine) with the config
keys that would lower it (`check_memory`).

Inputs: parameter counts from the model's own configs built on the meta device
(`models/architecture.py`) and the reward models' (`rewards/model_sizes.py`, placed by
`reward_memory.py`); activation bytes per token from the CPU calibration
(`benchmarks/calibrate_memory.py`, the family's `calibration.json` in its folder
`models/<family>/`), one coefficient per execution mode: eager (`replay`, CUDA's autocast
policy) or `model.compile=true` (`replay_compiled`). A model no architecture config or calibration entry describes is a
`NoMemoryEstimate` naming it and how to describe it, never a silent "nothing to check".

A role's peak is what stays on its GPU (frozen weights, trained state, the evaluator's reward
models) plus the largest of its phases, which never overlap: sampling, prompt encoding with
parked text encoders, replay (activations, autocast's casts of the trained weights, the
training reward), the optimizer step (AdamW's temporary) and evaluation; then the caching
allocator's headroom over those tensors and the CUDA context. The lines come from
`memory_terms.py`, their math from `memory_math.py`; docs/memory_plan.md states the model, how
close it came to the one GPU measurement and the share each family leaves unmodelled.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from genalign.config.errors import ConfigError
from genalign.models.spec import CALIBRATION
from genalign.preflight.memory_math import (
    DTYPE_BYTES,
    GIB,
    MASTER_BYTES,
    MASTERS,
    Line,
    device_overhead,
    prompt_embedding_bytes,
    trajectory_bytes,
)
from genalign.preflight.memory_terms import Terms, family_spec_of, latent_elements, plan_terms
from genalign.preflight.reward_memory import NoMemoryEstimate, RewardMemory, reward_memory
from genalign.preflight.step_sizes import StepSizes


@dataclass(frozen=True)
class Phase:
    """Lines alive only during one part of a step; phases of a role never overlap."""

    name: str
    lines: tuple[Line, ...]

    @property
    def bytes(self) -> float:
        return sum(b for _, b in self.lines)


@dataclass(frozen=True)
class Role:
    name: str
    resident: tuple[Line, ...]
    """(what, bytes) on this role's GPU throughout."""
    phases: tuple[Phase, ...] = ()

    @property
    def peak_phase(self) -> Phase:
        return max(self.phases, key=lambda phase: phase.bytes, default=Phase("none", ()))

    @property
    def lines(self) -> tuple[Line, ...]:
        """The tensors alive at the peak: the resident lines and the largest phase's."""
        return self.resident + self.peak_phase.lines

    @property
    def allocated_bytes(self) -> float:
        """The planned tensors at the peak: what `torch.cuda.max_memory_allocated` measures."""
        return sum(b for _, b in self.lines)

    @property
    def peak_bytes(self) -> float:
        """Everything on the GPU at the peak: the tensors, the allocator's headroom and the CUDA context."""
        return self.allocated_bytes + sum(b for _, b in device_overhead(self.allocated_bytes))

    def describe(self) -> list[str]:
        peak = self.peak_phase
        at = f" at its {peak.name} phase" if self.phases else ""
        lines = [
            f"  {self.name}: peak ~{self.peak_bytes / GIB:.1f} GiB per GPU "
            f"({self.allocated_bytes / GIB:.1f} GiB of tensors{at})"
        ]
        lines += [f"    {what}: {value / GIB:.2f} GiB" for what, value in self.resident]
        if self.phases:
            others = ", ".join(f"{p.name} {p.bytes / GIB:.2f}" for p in self.phases)
            lines.append(f"    {peak.name} phase, the largest (phases in GiB: {others}):")
            lines += [f"      {what}: {value / GIB:.2f} GiB" for what, value in peak.lines]
        lines += [f"    {what}: {value / GIB:.2f} GiB" for what, value in device_overhead(self.allocated_bytes)]
        return lines


@dataclass(frozen=True)
class MemoryEstimate:
    """Each role's estimated per-GPU peak, the host memory per step and the GPU budget they
    are checked against (`describe()` is the printed memory plan)."""

    roles: tuple[Role, ...]
    host: tuple[Line, ...]
    """(what, bytes) the trainer process keeps in host memory per step."""
    gpu_memory_bytes: float | None
    gpu_memory_source: str
    source: str
    """Where the parameter counts came from."""
    levers: tuple[str, ...]
    """Config changes that lower the peak, for the error."""
    activations: str = CALIBRATION
    """Where the activation coefficients came from (the calibration's `measured_on`)."""
    gpu_memory_fraction: float | None = 0.9
    """The share of the GPU a role's peak may fill (distributed.resources.gpu_memory_fraction)."""
    notes: tuple[str, ...] = ()

    @property
    def limit_bytes(self) -> float | None:
        if not self.gpu_memory_bytes or self.gpu_memory_fraction is None:
            return None
        return self.gpu_memory_bytes * self.gpu_memory_fraction

    def describe(self) -> str:
        lines = [f"memory plan (parameter counts: {self.source}; activations: {self.activations}):"]
        for role in self.roles:
            lines += role.describe()
        lines += [f"  {note}" for note in self.notes]
        lines.append("  host memory per step: " + ", ".join(f"{w} {v / GIB:.2f} GiB" for w, v in self.host))
        lines.append(f"  GPU memory: {self._budget()}")
        return "\n".join(lines)

    def _budget(self) -> str:
        if not self.gpu_memory_bytes:
            return "unknown (no CUDA device; set distributed.resources.gpu_memory_gib to check a plan)"
        budget = f"{self.gpu_memory_bytes / GIB:.1f} GiB ({self.gpu_memory_source})"
        if self.limit_bytes is None:
            return f"{budget}; not checked (distributed.resources.gpu_memory_fraction=null)"
        return (
            f"{budget}; a role may use {self.gpu_memory_fraction:g} of it, {self.limit_bytes / GIB:.1f} GiB "
            "(distributed.resources.gpu_memory_fraction)"
        )

    def problems(self) -> list[str]:
        limit = self.limit_bytes
        if limit is None:
            return []
        return [
            f"memory plan: {r.name} needs ~{r.peak_bytes / GIB:.1f} GiB per GPU ({r.allocated_bytes / GIB:.1f} "
            f"GiB of tensors + allocator headroom + CUDA context) but may use {limit / GIB:.1f} GiB: "
            f"{self.gpu_memory_fraction:g} (distributed.resources.gpu_memory_fraction) of "
            f"{self.gpu_memory_bytes / GIB:.1f} GiB ({self.gpu_memory_source}); levers that lower it: "
            f"{'; '.join(self.levers) or 'none left: use a GPU with more memory'}"
            for r in self.roles
            if r.peak_bytes > limit
        ]

    def check(self) -> None:
        problems = self.problems()
        if problems:
            raise ConfigError(problems, hint="genalign config prints the whole plan; docs/memory_plan.md explains it")


def check_memory(cfg, report: Callable[[str], None], always: bool = False) -> MemoryEstimate | None:
    """The plan, checked, and handed to `report` when the run plans a GPU (`plans_gpu`) or
    `always` (`genalign config --memory`): on a CPU run it would be a screenful of zeros. A model
    the plan cannot describe is reported likewise and, when there is a GPU to check against (a
    CUDA device or gpu_memory_gib) and gpu_memory_fraction is set, refused: the `NoMemoryEstimate`
    says what to add."""
    shown = always or plans_gpu(cfg)
    try:
        plan = estimate_memory(cfg)
    except NoMemoryEstimate as refusal:
        if shown:
            report(refusal.problems[0])
        if cfg.distributed.resources.gpu_memory_fraction is not None and _gpu_memory(cfg)[0]:
            raise
        return None
    if shown:
        report(plan.describe())
    plan.check()
    return plan


def plans_gpu(cfg) -> bool:
    """Whether this run puts anything on a GPU: a CUDA model.device (or "auto" with one
    present), or a GPU size given to plan against (distributed.resources.gpu_memory_gib)."""
    if cfg.distributed.resources.gpu_memory_gib is not None or cfg.model.device.startswith("cuda"):
        return True
    if cfg.model.device != "auto":
        return False
    import torch

    return torch.cuda.is_available()


def estimate_memory(cfg) -> MemoryEstimate:
    """The plan of a validated config. `NoMemoryEstimate` when no architecture config or
    calibration entry describes the model, or no config a reward model on these GPUs."""
    terms = plan_terms(cfg)
    rewards = reward_memory(cfg)
    memory, memory_source = _gpu_memory(cfg)
    notes = list(rewards.notes)
    if terms.fsdp and terms.ranks == 1:
        notes.append(
            "FSDP2 planned for 1 rank: set distributed.resources.trainer.num_gpus=N (or run under "
            "torchrun, whose WORLD_SIZE counts) to plan N"
        )
    return MemoryEstimate(
        _roles(cfg, terms, rewards),
        _host(cfg, terms),
        memory,
        memory_source,
        terms.arch.source,
        tuple(_levers(cfg, terms, rewards)),
        f"{CALIBRATION}, {terms.calibration['measured_on']}",
        cfg.distributed.resources.gpu_memory_fraction,
        tuple(notes),
    )


# ---------------------------------------------------------------- roles by placement
def _roles(cfg, t: Terms, rewards: RewardMemory) -> tuple[Role, ...]:
    actors = tuple(Role(name, lines) for name, lines in rewards.actor_lines)
    if cfg.rollout.engine == "local":
        name = (
            f"trainer with in-process rollout (each of {t.ranks} rank(s))"
            if t.ranks > 1
            else "trainer with in-process rollout"
        )
        sampling = _phase("rollout", t.sampling, t.cache)  # the training reward offloaded, unless resident
        return (Role(name, _trainer_resident(t, rewards), (sampling, *_trainer_phases(t, rewards))), *actors)
    trainer = Role("trainer", _trainer_resident(t, rewards), _trainer_phases(t, rewards))
    worker = _worker_lines(t)
    worker_phases = (_phase("rollout", t.sampling, t.cache), *_encode_phase(t))
    if not cfg.distributed.colocated:
        return (trainer, Role(f"rollout worker (each of {cfg.rollout.num_workers})", worker, worker_phases), *actors)
    # the idle side's modules are on the CPU (rollout/ray_engine.py): what stays on the shared
    # GPU while the worker samples is the trainer's optimizer state (masters park with the
    # module) and the evaluator's reward models (never offloaded)
    resident = tuple(line for line in t.state if not line[0].startswith(MASTERS)) + rewards.evaluation
    return (
        Role("shared GPU, rollout phase (worker active; trainer's modules on CPU)", worker + resident, worker_phases),
        Role("shared GPU, train phase (trainer active; worker on CPU)", trainer.resident, trainer.phases),
        *actors,
    )


def _trainer_resident(t: Terms, rewards: RewardMemory) -> tuple[Line, ...]:
    always = rewards.training if rewards.always_resident else ()
    return (*t.frozen, *t.state, t.micro, *rewards.evaluation, *always)


def _trainer_phases(t: Terms, rewards: RewardMemory) -> tuple[Phase, ...]:
    """The trainer's phases after sampling; the training reward, onloaded to score, stays
    through them (it is offloaded again only when the next rollout starts)."""
    scoring = () if rewards.always_resident else rewards.training
    phases = [
        *_encode_phase(t),
        _phase("replay", *t.replay, t.cache, *scoring),
        _phase("optimizer step", t.optimizer, *scoring),
    ]
    if t.evaluation is not None:
        phases.append(_phase("evaluation", t.evaluation, t.cache, t.ema_swap, *scoring))
    return tuple(phases)


def _phase(name: str, *lines: Line | None) -> Phase:
    """A phase of the lines that apply (None: a line this run does not have)."""
    return Phase(name, tuple(line for line in lines if line is not None))


def _encode_phase(t: Terms) -> tuple[Phase, ...]:
    if not t.encoders:
        return ()
    return (
        Phase("prompt encoding", (("text encoders while prompts are encoded (on the CPU otherwise)", t.encoders),)),
    )


def _worker_lines(t: Terms) -> tuple[Line, ...]:
    """A Ray rollout worker's own copy of every frozen module and the trained weights (fp32)."""
    weights = tuple((f"worker's {what}", b) for what, b in t.frozen if "reference" not in what)
    return (*weights, ("trainable weights at the worker (fp32)", float(t.trained * MASTER_BYTES)))


def _host(cfg, t: Terms) -> tuple[Line, ...]:
    run, m, arch = StepSizes.from_config(cfg), cfg.model, t.arch
    pixels = cfg.rollout.height * cfg.rollout.width * m.num_frames
    embedding_rows = run.prompts_per_step + (1 if run.uses_cfg else 0)  # SharedCondition: prompts + 1 negative
    text_tokens = arch.geometry.text_tokens(m.max_sequence_length)
    lines = (
        (
            "trajectories",
            trajectory_bytes(run.samples_per_step, cfg.rollout.num_steps, latent_elements(arch, cfg), pixels),
        ),
        (
            "prompt embeddings",
            prompt_embedding_bytes(embedding_rows, text_tokens, arch.text_width, DTYPE_BYTES[m.dtype]),
        ),
    )
    if cfg.rollout.overlap == "one_step":  # the next step's rollout arrives while this one trains
        return lines + tuple((f"{what} of the next step (rollout.overlap)", size) for what, size in lines)
    return lines


def _gpu_memory(cfg) -> tuple[float | None, str]:
    key = cfg.distributed.resources.gpu_memory_gib
    if key is not None:
        return float(key) * GIB, "distributed.resources.gpu_memory_gib"
    import torch

    if torch.cuda.is_available():
        return float(torch.cuda.get_device_properties(0).total_memory), torch.cuda.get_device_name(0)
    return None, "no CUDA device"


def _levers(cfg, t: Terms, rewards: RewardMemory) -> list[str]:
    """The config changes not yet made that lower a peak."""
    m, levers, uses_cfg = cfg.model, [], cfg.rollout.guidance_scale > 1.0
    if m.train_mode == "full":
        levers.append("model.train_mode=lora")
    if m.dtype == "float32":
        levers.append("model.dtype=bfloat16")
    if not m.compile:
        levers.append("model.compile=true (the compiled graph keeps a fifth to a third fewer replay activations)")
    if not m.gradient_checkpointing and family_spec_of(cfg).gradient_checkpointing:
        levers.append("model.gradient_checkpointing=true")
    micro = cfg.actor.micro_batch_size or cfg.rollout.sample_batch_size
    if micro > 1:
        levers.append(
            f"actor.micro_batch_size={max(1, micro // 2)} (and rollout.sample_batch_size to match for bitwise parity)"
        )
    if uses_cfg and family_spec_of(cfg).split_cfg and not (m.cfg_batch == "split" and cfg.algorithm.detach_uncond):
        levers.append("model.cfg_batch=split with algorithm.detach_uncond=true")
    if cfg.actor.ema.enabled:
        levers.append("actor.ema.enabled=false")
    if not m.offload_text_encoders and family_spec_of(cfg).text_encoders:
        levers.append("model.offload_text_encoders=true (on the device only while prompts are encoded)")
    if rewards.training or rewards.evaluation:
        levers.append("reward.runtime=ray with reward.num_gpus_per_worker=1 (reward models on a GPU of their own)")
    if cfg.distributed.colocated:
        levers.append("/base/distributed=ray_rollout (rollout worker on its own GPU)")
    if cfg.distributed.training.strategy != "fsdp2":
        levers.append(
            "distributed.training.strategy=fsdp2 under torchrun with rollout.engine=local "
            "(shards the transformer and optimizer state over the ranks)"
        )
    else:
        levers.append(
            f"more FSDP2 ranks (now {t.ranks}: distributed.resources.trainer.num_gpus, torchrun --nproc_per_node)"
        )
    return levers
