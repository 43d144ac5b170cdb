"""Role budgets -> concrete placement: which devices the trainer and each rollout worker get.

Where it fits: before anything is built. Preflight (`ray_pools.resource_problems`) plans it so an
impossible request (more GPUs than visible, overlapping pinned devices, a cross-node preset
without `$RAY_ADDRESS`) is a config error before any model loads or actor starts; the Ray
rollout engine calls `resolve_resources` to learn how to start Ray and place its actors.

The inputs that describe the machine — the visible GPUs (`CUDA_VISIBLE_DEVICES`) and the
Ray head (`RAY_ADDRESS`) — are read from the environment by `environment_facts`, never
from YAML, and passed in explicitly, so the planning itself is a pure function tested with
made-up machines.

Rules (the shipped presets, docs/distributed.md):
- colocated (`ray_rollout_colocated_single_gpu`): rollout workers share the trainer's devices;
- split (`ray_rollout`): the trainer takes `trainer.num_gpus` devices, the rollout gets
  `rollout.num_gpus` of the rest ("auto" = all the rest);
- pinned (`resources.visible_devices`, `.trainer.devices`, `.rollout.devices`): the listed
  physical devices decide a role's GPUs (its `num_gpus` is then not used); pinned trainer
  and rollout devices must not overlap;
- cross-node (`ray_rollout_cross_node`): Ray places the workers in the cluster at
  `$RAY_ADDRESS`, so devices cannot be pinned and `rollout.num_gpus` must be a number;
- no visible GPU: every role runs on CPU (the same presets work on a laptop);
- every granted GPU is used or the plan is refused: a rollout worker samples on one device,
  so a worker is never given several whole GPUs (add workers instead), and a one-process
  trainer (`distributed.training.strategy=none`) trains on one device; the trainer's first
  device (`Placement.trainer_cuda_indices`) becomes its `cuda` device.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass

from genalign.config.errors import ConfigError
from genalign.placement.config import DistributedConfig

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class EnvironmentFacts:
    """What the machine and launcher say (never the YAML)."""

    visible_gpus: tuple[int, ...]
    """Physical indices of the GPUs this process may use (from CUDA_VISIBLE_DEVICES)."""
    ray_address: str | None
    """$RAY_ADDRESS: the head of an existing Ray cluster, or None."""


@dataclass(frozen=True)
class RolloutPlacement:
    num_workers: int
    num_cpus_per_worker: float
    num_gpus_per_worker: float
    """What each actor asks Ray for (0 on CPU)."""
    worker_devices: tuple[tuple[int, ...], ...] | None
    """Physical devices each worker sees (set as its CUDA_VISIBLE_DEVICES); None = Ray
    chooses (cross-node) or CPU."""


@dataclass(frozen=True)
class Placement:
    """Where each role of the run runs: the trainer's devices, the rollout workers' actors,
    and the Ray instance to start or join."""

    uses_gpu: bool
    trainer_devices: tuple[int, ...]
    """Physical devices of the trainer process (empty on CPU)."""
    trainer_local_index: int | None
    """`cuda:<index>` of the trainer's first device within this process's visible list."""
    trainer_cuda_indices: tuple[int, ...]
    """`cuda:<index>` of each trainer device within this process's visible list; a torchrun
    rank takes entry LOCAL_RANK (empty: no trainer budget, `cuda` stays the default device)."""
    rollout: RolloutPlacement | None
    """None when rollout runs in-process (rollout.engine=local)."""
    colocated: bool
    ray_address: str | None
    """Join this cluster (cross-node); None = start a private local Ray instance."""
    ray_num_cpus: float
    ray_num_gpus: float

    def describe(self) -> str:
        if self.rollout is None:
            return f"in-process rollout; trainer on {_devices_text(self.trainer_devices)}"
        r = self.rollout
        where = f"cluster at {self.ray_address}" if self.ray_address else "a local Ray instance"
        pins = "" if r.worker_devices is None else f", worker devices {[list(d) for d in r.worker_devices]}"
        return (
            f"trainer on {_devices_text(self.trainer_devices)}; {r.num_workers} rollout worker(s) on {where}, "
            f"each {r.num_cpus_per_worker:g} CPU / {r.num_gpus_per_worker:g} GPU{pins}"
            f"{' (colocated with the trainer)' if self.colocated else ''}"
        )


def _devices_text(devices: tuple[int, ...]) -> str:
    return f"GPU(s) {list(devices)}" if devices else "CPU"


def parse_visible_devices(value: str | None, device_count: int) -> tuple[int, ...]:
    """Physical GPU indices visible to this process: CUDA_VISIBLE_DEVICES (first
    `device_count` entries that CUDA accepted) or 0..device_count-1 when unset."""
    if device_count == 0:
        return ()
    if value is None or value.strip() == "":
        return tuple(range(device_count))
    entries = [e.strip() for e in value.split(",") if e.strip()]
    if not all(e.isdigit() for e in entries):
        raise ValueError(
            f"CUDA_VISIBLE_DEVICES={value!r}: genalign places roles by integer device index; "
            "list devices as integers (e.g. 0,1,2,3)"
        )
    return tuple(int(e) for e in entries[:device_count])


def environment_facts() -> EnvironmentFacts:
    """Read CUDA_VISIBLE_DEVICES / the CUDA device count and RAY_ADDRESS."""
    from genalign.placement.devices import visible_cuda_device_count  # lazy: torch, only to count CUDA devices

    return EnvironmentFacts(
        parse_visible_devices(os.environ.get("CUDA_VISIBLE_DEVICES"), visible_cuda_device_count()),
        os.environ.get("RAY_ADDRESS") or None,
    )


def _gpu_count(value: float | str, key: str, problems: list[str], allow_auto: bool) -> float | None:
    """A role's num_gpus as a number (None = "auto"); bad values are reported."""
    if isinstance(value, str):
        if value == "auto" and allow_auto:
            return None
        problems.append(f"{key}={value!r}: use a number{' or auto' if allow_auto else ''}")
        return 0.0
    if value < 0:
        problems.append(f"{key}={value} must be >= 0")
        return 0.0
    return float(value)


def _one_device_per_worker(num_gpus: int, devices: str, num_workers: int) -> str:
    return (
        f"{num_gpus} rollout GPU(s){devices} for rollout.num_workers={num_workers} would give each worker "
        f"{num_gpus // num_workers} GPUs, but a rollout worker samples on one GPU and would leave the rest idle; "
        f"set rollout.num_workers={num_gpus} and distributed.resources.rollout.num_workers={num_gpus} (one "
        f"worker per GPU), or distributed.resources.rollout.num_gpus={num_workers}"
    )


def _split_among_workers(
    devices: tuple[int, ...], num_workers: int, problems: list[str]
) -> tuple[float, tuple[tuple[int, ...], ...]]:
    """GPUs per worker and each worker's devices: one whole device each when there are as many
    devices as workers, else workers share devices round-robin. More devices than workers
    is refused (a worker would use one of its devices)."""
    if len(devices) >= num_workers:
        if len(devices) > num_workers:
            problems.append(_one_device_per_worker(len(devices), f" {list(devices)}", num_workers))
        per = len(devices) // num_workers
        return float(per), tuple(devices[i * per : (i + 1) * per] for i in range(num_workers))
    return len(devices) / num_workers, tuple((devices[i % len(devices)],) for i in range(num_workers))


def plan_resources(
    dist: DistributedConfig, engine: str, rollout_workers: int, strategy: str, facts: EnvironmentFacts
) -> tuple[Placement | None, list[str]]:
    """Pure planning: (plan, problems). The plan is None when there are problems."""
    res, ray = dist.resources, engine == "ray"
    problems = _pin_problems(res)
    trainer_gpus = _gpu_count(res.trainer.num_gpus, "distributed.resources.trainer.num_gpus", problems, False)
    rollout_gpus = _gpu_count(res.rollout.num_gpus, "distributed.resources.rollout.num_gpus", problems, True)
    if trainer_gpus is not None and trainer_gpus != int(trainer_gpus):
        problems.append(
            f"distributed.resources.trainer.num_gpus={trainer_gpus:g}: the trainer process uses whole devices"
        )
    problems += _engine_problems(dist, ray, rollout_workers, strategy)
    problems += _cross_node_problems(dist, ray, facts, rollout_gpus)
    if problems:
        return None, problems
    workers = rollout_workers if ray else 0
    if not facts.visible_gpus:  # CPU machine: the same presets, CPU resources
        return _cpu_plan(dist, ray, workers, facts), []
    return _gpu_plan(dist, ray, workers, strategy, facts, trainer_gpus, rollout_gpus)


def _pin_problems(res) -> list[str]:
    """Pinned device lists: distinct non-negative indices, inside visible_devices, and the
    trainer's and the rollout's apart."""
    problems: list[str] = []
    pinned = {
        "distributed.resources.visible_devices": res.visible_devices,
        "distributed.resources.trainer.devices": res.trainer.devices,
        "distributed.resources.rollout.devices": res.rollout.devices,
    }
    for key, devices in pinned.items():
        if devices is not None and (len(set(devices)) != len(devices) or any(d < 0 for d in devices)):
            problems.append(f"{key}={devices}: device indices must be distinct and >= 0")
    pool_pin = res.visible_devices
    for key in ("distributed.resources.trainer.devices", "distributed.resources.rollout.devices"):
        if pool_pin is not None and pinned[key] is not None and not set(pinned[key]) <= set(pool_pin):
            problems.append(f"{key}={pinned[key]} is not within distributed.resources.visible_devices={list(pool_pin)}")
    if res.trainer.devices is not None and res.rollout.devices is not None:
        overlap = sorted(set(res.trainer.devices) & set(res.rollout.devices))
        if overlap:
            problems.append(
                f"distributed.resources.trainer.devices={res.trainer.devices} and "
                f"distributed.resources.rollout.devices={res.rollout.devices} overlap on {overlap}; "
                "pinned roles must use different devices (use the colocated preset to share one)"
            )
    return problems


def _engine_problems(dist: DistributedConfig, ray: bool, rollout_workers: int, strategy: str) -> list[str]:
    """The Ray rollout pool's size and CPUs, and what it cannot be combined with."""
    if not ray:
        if dist.preset.startswith("ray"):
            return [
                f"distributed.preset={dist.preset} with rollout.engine=local: the Ray presets need rollout.engine=ray"
            ]
        return []
    problems = []
    res = dist.resources
    if rollout_workers < 1:
        problems.append(f"rollout.num_workers={rollout_workers} must be >= 1 with rollout.engine=ray")
    if res.rollout.num_workers != rollout_workers:
        problems.append(
            f"rollout.num_workers={rollout_workers} and distributed.resources.rollout.num_workers="
            f"{res.rollout.num_workers} disagree; set both to the number of rollout actors"
        )
    if res.rollout.num_cpus <= 0:
        problems.append(f"distributed.resources.rollout.num_cpus={res.rollout.num_cpus} must be > 0")
    if strategy != "none":
        problems.append(
            f"rollout.engine=ray with distributed.training.strategy={strategy} is not supported: "
            "use rollout.engine=local (each rank samples its own groups) or strategy=none"
        )
    return problems


def _cross_node_problems(
    dist: DistributedConfig, ray: bool, facts: EnvironmentFacts, rollout_gpus: float | None
) -> list[str]:
    """distributed.cross_node joins a cluster that Ray places the workers in: no pins, no "auto"."""
    if not dist.cross_node:
        return []
    problems = []
    if not ray:
        problems.append("distributed.cross_node=true needs rollout.engine=ray")
    if facts.ray_address is None:
        problems.append(
            "distributed.cross_node=true (preset ray_rollout_cross_node) joins an existing Ray cluster: "
            "set RAY_ADDRESS=<head-ip>:6379 in the environment (genalign never starts or manages "
            "clusters; start one with `ray start --head`)"
        )
    if dist.resources.rollout.devices is not None or dist.resources.visible_devices is not None:
        problems.append(
            "distributed.resources.rollout.devices / visible_devices cannot pin devices on other "
            "nodes with distributed.cross_node=true; remove them and let Ray place the workers"
        )
    if rollout_gpus is None:
        problems.append(
            "distributed.resources.rollout.num_gpus=auto cannot be resolved across nodes; give the "
            "number of GPUs for all rollout workers together"
        )
    return problems


def _cpu_plan(dist: DistributedConfig, ray: bool, workers: int, facts: EnvironmentFacts) -> Placement:
    """No visible GPU: every role on CPU, whatever the preset asked for."""
    res = dist.resources
    if any(devices is not None for devices in (res.visible_devices, res.trainer.devices, res.rollout.devices)):
        log.warning("no GPU is visible: distributed.resources device pins are not used; every role runs on CPU")
    num_cpus = float(res.rollout.num_cpus)
    rollout = RolloutPlacement(workers, num_cpus, 0.0, None) if ray else None
    return Placement(
        False,
        (),
        None,
        (),
        rollout,
        dist.colocated,
        facts.ray_address if dist.cross_node else None,
        workers * num_cpus,
        0.0,
    )


def _gpu_plan(
    dist: DistributedConfig,
    ray: bool,
    workers: int,
    strategy: str,
    facts: EnvironmentFacts,
    trainer_gpus: float | None,
    rollout_gpus: float | None,
) -> tuple[Placement | None, list[str]]:
    """The trainer's devices, then the rollout workers' among the pool (visible_devices, else
    every visible GPU); every device named must be visible."""
    res, visible = dist.resources, facts.visible_gpus
    pool = tuple(res.visible_devices) if res.visible_devices is not None else visible
    missing = sorted((set(pool) | set(res.trainer.devices or ()) | set(res.rollout.devices or ())) - set(visible))
    if missing:
        return None, [
            f"distributed.resources pins device(s) {missing} but only {list(visible)} are visible "
            "(CUDA_VISIBLE_DEVICES); pin visible devices or widen CUDA_VISIBLE_DEVICES"
        ]
    problems: list[str] = []
    trainer_devices = _trainer_devices(res, pool, trainer_gpus, strategy, problems)
    colocated = dist.colocated and res.rollout.devices is None
    if dist.colocated and not colocated:
        log.warning(
            "distributed.colocated=true but distributed.resources.rollout.devices pins the rollout to "
            "%s: the pins win, rollout and trainer use different devices",
            res.rollout.devices,
        )
    placement = (
        _rollout_placement(dist, workers, trainer_devices, pool, rollout_gpus, colocated, problems) if ray else None
    )
    if problems:
        return None, problems
    cuda_indices = tuple(visible.index(d) for d in trainer_devices)
    local_index = cuda_indices[0] if cuda_indices else None
    ray_gpus = (
        float(len(set(d for ds in placement.worker_devices for d in ds)))
        if (placement and placement.worker_devices)
        else 0.0
    )
    return Placement(
        True,
        trainer_devices,
        local_index,
        cuda_indices,
        placement,
        colocated,
        facts.ray_address if dist.cross_node else None,
        workers * float(res.rollout.num_cpus),
        ray_gpus,
    ), []


def _trainer_devices(
    res, pool: tuple[int, ...], trainer_gpus: float | None, strategy: str, problems: list[str]
) -> tuple[int, ...]:
    """The pinned trainer devices, else the first trainer.num_gpus of the pool; one process
    (strategy=none) trains on one device."""
    if res.trainer.devices is not None:
        devices = tuple(res.trainer.devices)
    else:
        count = int(trainer_gpus or 0)
        if count > len(pool):
            problems.append(
                f"distributed.resources.trainer.num_gpus={count} but only {len(pool)} GPU(s) are visible ({list(pool)})"
            )
        devices = tuple(pool[:count])
    if strategy == "none" and len(devices) > 1:
        key = (
            "distributed.resources.trainer.devices"
            if res.trainer.devices is not None
            else "distributed.resources.trainer.num_gpus"
        )
        problems.append(
            f"{key} gives the trainer GPUs {list(devices)}, but distributed.training.strategy=none "
            "trains in one process on one GPU; give the trainer one GPU, or launch torchrun "
            f"--nproc_per_node={len(devices)} with distributed.training.strategy=ddp or fsdp2"
        )
    return devices


def _rollout_placement(
    dist: DistributedConfig,
    workers: int,
    trainer_devices: tuple[int, ...],
    pool: tuple[int, ...],
    rollout_gpus: float | None,
    colocated: bool,
    problems: list[str],
) -> RolloutPlacement | None:
    """What each Ray rollout actor asks for: a share of rollout.num_gpus across nodes (Ray
    places them), else its own devices of this node (None when `problems` has any)."""
    num_cpus = float(dist.resources.rollout.num_cpus)
    if dist.cross_node:
        per_worker = (rollout_gpus or 0.0) / workers
        if per_worker > 1:
            problems.append(_one_device_per_worker(int(rollout_gpus), "", workers))
        return RolloutPlacement(workers, num_cpus, per_worker, None)
    rollout_devices = _rollout_devices(dist.resources, colocated, trainer_devices, pool, rollout_gpus, problems)
    if problems:
        return None
    per_worker, worker_devices = _split_among_workers(rollout_devices, workers, problems)
    return RolloutPlacement(workers, num_cpus, per_worker, worker_devices)


def _rollout_devices(
    res,
    colocated: bool,
    trainer_devices: tuple[int, ...],
    pool: tuple[int, ...],
    rollout_gpus: float | None,
    problems: list[str],
) -> tuple[int, ...]:
    """The devices the rollout workers share: pinned; the trainer's (colocated); every device
    the trainer leaves ("auto"); or as many of those as rollout.num_gpus needs."""
    if res.rollout.devices is not None:
        return tuple(res.rollout.devices)
    if colocated:
        if not trainer_devices:
            problems.append(
                "distributed.colocated=true shares the trainer's GPU, but distributed.resources.trainer.num_gpus=0"
            )
        wanted = len(trainer_devices) if rollout_gpus is None else rollout_gpus
        if wanted > len(trainer_devices):
            problems.append(
                f"distributed.resources.rollout.num_gpus={wanted:g} but the colocated rollout shares "
                f"only the trainer's {len(trainer_devices)} GPU(s)"
            )
        return trainer_devices[: max(1, int(wanted))] if trainer_devices else ()
    rest = tuple(d for d in pool if d not in trainer_devices)
    if rollout_gpus is None:
        if not rest:
            problems.append(
                f"distributed.resources.rollout.num_gpus=auto: no GPU is left for rollout after the "
                f"trainer's {list(trainer_devices)} (visible: {list(pool)}); use the colocated preset "
                "/base/distributed=ray_rollout_colocated_single_gpu or free a device"
            )
        return rest
    need = max(1, int(-(-rollout_gpus // 1)))  # whole devices that hold the request
    if need > len(rest):
        problems.append(
            f"distributed.resources.rollout.num_gpus={rollout_gpus:g} with trainer.num_gpus="
            f"{len(trainer_devices)} needs {len(trainer_devices) + need} GPUs but only {len(pool)} "
            f"are visible ({list(pool)})"
        )
    return rest[:need]


def resolve_resources(cfg, facts: EnvironmentFacts | None = None) -> Placement:
    """The placement of this run; raises `ConfigError` listing every problem."""
    facts = facts if facts is not None else environment_facts()
    placement, problems = plan_resources(
        cfg.distributed, cfg.rollout.engine, cfg.rollout.num_workers, cfg.distributed.training.strategy, facts
    )
    if problems:
        raise ConfigError(problems)
    return placement
