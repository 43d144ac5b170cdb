"""Ray rollout: `rollout.num_workers` actors, each holding a policy copy, sample the step's groups.

Where it fits: steps 2 and 6 of the loop (docs/architecture.md §2) when `rollout.engine=ray`.
The trainer calls `generate(groups, spec)` (or `generate_chunks`: the same shards one at a
time); the engine cuts the step's samples into contiguous shards on group *and*
sampling-chunk boundaries, so every denoiser batch a worker runs is exactly a batch the
in-process engine would run, and `TrajectoryBatch.cat` of the shards equals
(bitwise on CPU) the in-process result for the same seeds. After each optimizer round the
trainer calls `sync(trainable_state, version)`: only the trainable tensors (LoRA when LoRA)
go to the object store once and every worker loads them; each worker answers with a
fingerprint of its own trainable tensors *after* loading, checked against the trainer's, so
an adapter that bound to other modules or a stale worker is an error naming the worker.

Each worker builds its policy with the `policy_factory` the engine is given (the trainer
passes `training/setup.py:build_policy`, so a worker's copy is built exactly as the trainer's;
the factory travels to the actor by reference, and rollout imports nothing of training).

Failure semantics: a worker that dies (process killed, OOM) during `generate` is replaced
once — a fresh actor built from the same config and factory, loaded with the last synced weights and
verified — and its shard is generated again; a second failure fails the step with the
worker's error. Every `ray.get` is bounded by a timeout, so nothing hangs.

Placement (which devices, how many CPUs, local instance or `$RAY_ADDRESS`) comes from
`placement/resources.py:resolve_resources`; this module only starts and talks to actors.
Colocated (one device shared by the trainer and its workers): the two sides' copies are never
on the device together. The engine parks the trainer's modules on the CPU (`place_policy`)
while workers build and sample, and has every worker park its own before the trainer's come
back for replay, backward and evaluation (`_trainer_parked`).
"""

from __future__ import annotations

import logging
import math
import time
from contextlib import contextmanager
from dataclasses import replace
from typing import Callable, Iterator

import torch

from genalign.config.errors import UserError
from genalign.config.loader import config_from_dict, config_to_dict
from genalign.config.schema import ExperimentConfig
from genalign.data.sampler import PromptGroupBatch
from genalign.models.base import FlowPolicy
from genalign.placement.devices import release_device_memory
from genalign.placement.resources import resolve_resources
from genalign.ray_session import init_ray
from genalign.rollout.batch import TrajectoryBatch, cat_batches
from genalign.rollout.collector import SamplingSpec, generate
from genalign.weights.lora import load_trainable_state_dict, state_fingerprint, trainable_state_dict

log = logging.getLogger(__name__)


class RolloutWorkerError(RuntimeError):
    """A rollout worker failed in a way the engine does not recover from."""


def shard_positions(num_samples: int, unit: int, num_shards: int) -> list[list[int]]:
    """Contiguous sample positions per shard, cut only at multiples of `unit`.

    `unit` = lcm(group size, sampling chunk), so shards hold whole groups and whole
    denoiser batches. Units are spread as evenly as possible; trailing shards may be empty
    when there are fewer units than shards."""
    if num_samples % unit:
        raise ValueError(f"{num_samples} samples are not a whole number of {unit}-sample shard units")
    units = num_samples // unit
    base, extra = divmod(units, num_shards)
    shards, start = [], 0
    for shard in range(num_shards):
        size = (base + (1 if shard < extra else 0)) * unit
        shards.append(list(range(start, start + size)))
        start += size
    return shards


def shard_unit(groups: PromptGroupBatch, chunk_size: int) -> int:
    """Samples per indivisible piece: whole groups and whole sampling chunks."""
    group_sizes = torch.unique_consecutive(groups.group_ids, return_counts=True)[1]  # [G]
    group_size = int(group_sizes[0])
    if not torch.all(group_sizes == group_size):
        raise ValueError("prompt groups of unequal size cannot be sharded across rollout workers")
    return math.lcm(group_size, chunk_size)


def _policy_modules(policy) -> dict[str, torch.nn.Module]:
    """Every module the policy holds (directly or through a diffusers pipeline it holds: an
    attribute with a `components` mapping), by attribute name."""
    holders = [policy] + [
        value for value in vars(policy).values() if isinstance(getattr(value, "components", None), dict)
    ]
    found: dict[int, tuple[str, torch.nn.Module]] = {}
    for holder in holders:
        components = getattr(holder, "components", None)
        named = list(vars(holder).items()) + list(components.items() if isinstance(components, dict) else [])
        for name, value in named:
            if isinstance(value, torch.nn.Module) and id(value) not in found:
                found[id(value)] = (name, value)
    return dict(found.values())


def place_policy(policy, device: torch.device) -> tuple[str, ...]:
    """Move every module of `policy` (denoiser, text encoders, VAE) to `device`; the names moved.
    Text encoders that `model.offload_text_encoders` keeps on the CPU stay there.

    `module.to` keeps each Parameter object (it swaps `.data`), so an optimizer holding the
    trained parameters still holds them after a round trip. `policy.device` stays the home
    device: nothing computes while the policy is parked."""
    parked = {id(encoder) for encoder in getattr(policy, "offloaded_text_encoders", ())}
    modules = {
        name: module
        for name, module in _policy_modules(policy).items()
        if device.type == "cpu" or id(module) not in parked
    }  # parked encoders come only to encode
    for module in modules.values():
        module.to(device)
    return tuple(sorted(modules))


def _reason(error: Exception) -> str:
    """The worker-side exception behind a Ray error, without Ray's traceback decoration."""
    cause = getattr(error, "cause", None)
    return f"{type(cause).__name__}: {cause}" if isinstance(cause, Exception) else f"{type(error).__name__}: {error}"


def user_error_inside(error: Exception) -> Exception | None:
    """The genalign `UserError` a worker raised (a non-finite latent or image, a bad input),
    unwrapped from Ray's `RayTaskError`, else None: the user gets the same one line as with the
    in-process engine, not a worker traceback."""
    cause = getattr(error, "cause", None)
    return cause if isinstance(cause, UserError) else None


class RolloutWorker:
    """One Ray actor: a policy copy built exactly as the trainer builds its own."""

    def __init__(self, config: dict, worker_index: int, policy_factory: Callable[[ExperimentConfig], FlowPolicy]):
        cfg = config_from_dict(config, source=f"rollout worker {worker_index}")
        self.worker_index = worker_index
        torch.manual_seed(cfg.trainer.seed)  # the trainer's adapter initialisation; replaced by the first sync
        built = time.monotonic()
        self.policy = policy_factory(cfg)  # on the worker's device
        self.policy.transformer.eval()
        self.version: int | None = None
        self.released = False
        self.placements_log: list[tuple[float, str, tuple[str, ...]]] = [
            (built, "device", tuple(sorted(_policy_modules(self.policy))))
        ]
        """(time.monotonic(), "device" | "cpu", modules) of every placement, from the build on
        (`placements()`; CLOCK_MONOTONIC is one clock for every process on the machine)."""

    def pid(self) -> int:
        import os

        return os.getpid()

    @torch.no_grad()
    def load(self, state: dict[str, torch.Tensor], version: int) -> str:
        """Load trainable tensors of policy `version`; return the fingerprint of what the
        model now holds (not of what was sent)."""
        load_trainable_state_dict(self.policy.transformer, state)
        self.version = version
        return state_fingerprint(trainable_state_dict(self.policy.transformer))

    def generate(
        self, groups: PromptGroupBatch, positions: list[int], spec: SamplingSpec, version: int
    ) -> TrajectoryBatch:
        """Sample `positions` of the step's `groups` (the whole step is sent so prompts are
        encoded exactly as in-process, see `collector.generate`)."""
        if self.version != version:
            raise RolloutWorkerError(
                f"rollout worker {self.worker_index} holds policy version {self.version}, "
                f"asked to sample with version {version} (stale weights)"
            )
        if self.released:
            self._place(self.policy.device, "device")
            self.released = False
        self.policy.transformer.eval()
        return generate(self.policy, groups, spec, positions)

    def release_memory(self) -> None:
        """Colocated mode: every module to the CPU and the cached device memory back to the
        driver, so the trainer can load its copy for replay/backward (and evaluation)."""
        self._place(torch.device("cpu"), "cpu")
        release_device_memory()
        self.released = True

    def placements(self) -> list[tuple[float, str, tuple[str, ...]]]:
        return list(self.placements_log)

    def _place(self, device: torch.device, where: str) -> None:
        self.placements_log.append((time.monotonic(), where, place_policy(self.policy, device)))


class RayRolloutEngine:
    """`RolloutEngine` over Ray actors (see the module docstring for the contract)."""

    needs_sync = True
    version: int | None = None
    """The version of the weights the workers hold (the last `sync`'s)."""

    def __init__(
        self,
        cfg,
        initial_state: dict[str, torch.Tensor],
        policy_factory: Callable[[ExperimentConfig], FlowPolicy],
        *,
        trainer_policy=None,
        start_timeout_s: float = 600.0,
        sync_timeout_s: float = 300.0,
        generate_timeout_s: float = 1800.0,
    ):
        import ray

        self.placement = resolve_resources(cfg)
        rollout = self.placement.rollout
        if rollout is None:
            raise ValueError("RayRolloutEngine needs rollout.engine=ray")
        self.start_timeout_s, self.sync_timeout_s, self.generate_timeout_s = (
            start_timeout_s,
            sync_timeout_s,
            generate_timeout_s,
        )
        self.owns_ray = not ray.is_initialized()
        if self.owns_ray:
            placement = self.placement
            if placement.ray_address:
                init_ray(placement.ray_address, log_to_driver=False)
            else:  # a private local instance (loopback) even if $RAY_ADDRESS happens to be set
                init_ray(None, num_cpus=placement.ray_num_cpus, num_gpus=placement.ray_num_gpus, log_to_driver=False)
        log.info("ray rollout: %s", self.placement.describe())
        model = replace(cfg.model, device="cuda" if rollout.num_gpus_per_worker > 0 else "cpu")
        self.worker_config = config_to_dict(replace(cfg, model=model))
        self.policy_factory = policy_factory
        """Builds each worker's policy from its config (module-level, so it pickles by reference)."""
        # colocated: the trainer's modules leave the shared device while a worker holds its
        # copy there, and the workers leave it before the trainer trains (verl's hybrid
        # engine offloads the idle side the same way); never both copies on one GPU
        self.trainer_policy = trainer_policy if self.placement.colocated else None
        self.trainer_placements: list[tuple[float, str, tuple[str, ...]]] = []
        """(time.monotonic(), "device" | "cpu", modules moved) of the trainer's moves."""
        with self._trainer_parked():
            self.workers = [self._start_worker(i) for i in range(rollout.num_workers)]
        self.version: int | None = None
        self.state_ref = None
        self.fingerprint: str | None = None
        self.sync(initial_state, version=0)

    # ---------------------------------------------------------------- colocated phases
    @contextmanager
    def _trainer_parked(self):
        """Colocated: the trainer's modules on the CPU for the block, the workers' released
        (on the CPU) at its end, then the trainer's back on its device. A no-op otherwise."""
        import ray

        if not self.placement.colocated:
            yield
            return

        if self.trainer_policy is not None:
            self._place_trainer(torch.device("cpu"), "cpu")
            release_device_memory()
        try:
            yield
            ray.get([worker.release_memory.remote() for worker in self.workers], timeout=self.sync_timeout_s)
        finally:
            if self.trainer_policy is not None:
                self._place_trainer(self.trainer_policy.device, "device")

    def _place_trainer(self, device: torch.device, where: str) -> None:
        self.trainer_placements.append((time.monotonic(), where, place_policy(self.trainer_policy, device)))

    def worker_placements(self) -> list[list[tuple[float, str, tuple[str, ...]]]]:
        """Each worker's module moves (`RolloutWorker.placements`)."""
        import ray

        return ray.get([worker.placements.remote() for worker in self.workers], timeout=self.start_timeout_s)

    # ---------------------------------------------------------------- actors
    def _start_worker(self, index: int):
        import ray

        rollout = self.placement.rollout
        options = {
            "num_cpus": rollout.num_cpus_per_worker,
            "num_gpus": rollout.num_gpus_per_worker,
            "max_restarts": 0,
            "max_concurrency": 1,
        }
        if rollout.worker_devices is not None:  # pinned: the worker sees exactly its physical devices
            options["runtime_env"] = {
                "env_vars": {
                    "CUDA_VISIBLE_DEVICES": ",".join(map(str, rollout.worker_devices[index])),
                    "RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES": "1",
                }
            }
        actor = ray.remote(RolloutWorker).options(**options).remote(self.worker_config, index, self.policy_factory)
        try:
            ray.get(actor.pid.remote(), timeout=self.start_timeout_s)
        except Exception as error:
            ray.kill(actor)
            raise RolloutWorkerError(f"rollout worker {index} failed to start: {_reason(error)}") from error
        return actor

    def _verify(self, index: int, fingerprint: str) -> None:
        if fingerprint != self.fingerprint:
            raise RolloutWorkerError(
                f"rollout worker {index}: weight fingerprint {fingerprint[:12]} after sync of version {self.version} "
                f"differs from the trainer's {self.fingerprint[:12]}; its trainable tensors are not the trainer's "
                "(an adapter bound to different modules, or a stale worker)"
            )

    # ---------------------------------------------------------------- RolloutEngine
    def sync(self, trainable_state: dict[str, torch.Tensor], version: int) -> dict[str, float]:
        """Push trainable tensors to every worker and check each one's fingerprint.

        Returns `sync_s` (wall seconds) and `sync_bytes` (payload bytes x workers)."""
        import ray

        start = time.perf_counter()
        state = {name: tensor.detach().cpu().contiguous() for name, tensor in trainable_state.items()}
        self.fingerprint = state_fingerprint(state)
        self.version = version
        self.state_ref = ray.put(state)
        pending = [worker.load.remote(self.state_ref, version) for worker in self.workers]
        for index, ref in enumerate(pending):
            try:
                fingerprint = ray.get(ref, timeout=self.sync_timeout_s)
            except Exception as error:
                raise RolloutWorkerError(
                    f"rollout worker {index} failed to load policy version {version}: {_reason(error)}"
                ) from error
            self._verify(index, fingerprint)
        payload = sum(t.numel() * t.element_size() for t in state.values())
        return {"sync_s": time.perf_counter() - start, "sync_bytes": float(payload * len(self.workers))}

    def generate(
        self, groups: PromptGroupBatch, spec: SamplingSpec, positions: list[int] | None = None
    ) -> TrajectoryBatch:
        return cat_batches(list(self.generate_chunks(groups, spec, positions)))

    def generate_chunks(
        self, groups: PromptGroupBatch, spec: SamplingSpec, positions: list[int] | None = None
    ) -> Iterator[TrajectoryBatch]:
        """The step's trajectories one worker's shard at a time, in shard order; every worker
        samples its shard at once, and each is handed on when it has arrived."""
        work, groups_ref = self._shards(groups, spec, positions)
        with self._trainer_parked():
            yield from self._collect(work, self._submit(work, groups_ref, spec), groups_ref, spec)

    def start(
        self, groups: PromptGroupBatch, spec: SamplingSpec, positions: list[int] | None = None
    ) -> Iterator[TrajectoryBatch]:
        """`generate_chunks`, submitted now: the workers sample (with the weights they hold)
        while the caller trains, and the iterator hands the shards on when they are read
        (rollout.overlap=one_step). Workers on their own devices only: a colocated worker
        would share the trainer's device with it."""
        if self.placement.colocated:
            raise ValueError("a colocated rollout cannot sample while the trainer trains (rollout.overlap=one_step)")
        work, groups_ref = self._shards(groups, spec, positions)
        return self._collect(work, self._submit(work, groups_ref, spec), groups_ref, spec)

    def rollout_state(self) -> tuple[dict[str, torch.Tensor], int | None]:
        """The trainable tensors the workers hold (the last `sync`) and their version."""
        import ray

        return (
            ray.get(self.state_ref, timeout=self.sync_timeout_s) if self.state_ref is not None else {}
        ), self.version

    def _shards(
        self, groups: PromptGroupBatch, spec: SamplingSpec, positions: list[int] | None
    ) -> tuple[list[tuple[int, list[int]]], object]:
        """(worker index, its sample positions) of every non-empty shard, and the groups in the object store."""
        import ray

        if positions is not None:  # config validation forbids Ray rollout under torchrun
            raise ValueError("the Ray rollout engine shards the whole step itself; it takes no rank positions")
        shards = shard_positions(len(groups), shard_unit(groups, spec.chunk_size), len(self.workers))
        return [(index, positions) for index, positions in enumerate(shards) if positions], ray.put(groups)

    def _submit(self, work: list[tuple[int, list[int]]], groups_ref, spec: SamplingSpec) -> dict:
        """Each shard's sampling task, submitted now; the worker checks it holds `self.version`."""
        return {
            index: self.workers[index].generate.remote(groups_ref, shard, spec, self.version) for index, shard in work
        }

    def _collect(
        self, work: list[tuple[int, list[int]]], pending: dict, groups_ref, spec: SamplingSpec
    ) -> Iterator[TrajectoryBatch]:
        """The submitted shards in shard order, each when it has arrived; a worker that died is
        replaced once and its shard sampled again, a timeout or a worker's error fails the step."""
        import ray

        deadline = time.monotonic() + self.generate_timeout_s
        for index, shard in work:
            try:
                result = self._get(pending[index], deadline)
            except (ray.exceptions.RayActorError, ray.exceptions.ObjectLostError) as error:
                log.warning(
                    "rollout worker %d died during rollout (%s); restarting it and re-generating its shard",
                    index,
                    type(error).__name__,
                )
                result = self._regenerate(index, groups_ref, shard, spec, error)
            except ray.exceptions.GetTimeoutError as error:
                raise RolloutWorkerError(
                    f"rollout worker {index} did not finish its shard within {self.generate_timeout_s:.0f}s"
                ) from error
            except ray.exceptions.RayTaskError as error:
                if (cause := user_error_inside(error)) is not None:
                    raise cause from None
                raise RolloutWorkerError(f"rollout worker {index} failed: {_reason(error)}") from error
            yield result

    def _get(self, ref, deadline: float):
        import ray

        return ray.get(ref, timeout=max(deadline - time.monotonic(), 0.001))

    def _regenerate(
        self, index: int, groups_ref, shard: list[int], spec: SamplingSpec, first_error: Exception
    ) -> TrajectoryBatch:
        import ray

        ray.kill(self.workers[index], no_restart=True)
        try:
            self.workers[index] = self._start_worker(index)  # bounded by start_timeout_s
            fingerprint = ray.get(
                self.workers[index].load.remote(self.state_ref, self.version), timeout=self.sync_timeout_s
            )
            self._verify(index, fingerprint)
            # the shard gets a whole generate_timeout_s of its own: the restart (building a
            # model, minutes on a busy machine) must not eat the time meant for sampling
            deadline = time.monotonic() + self.generate_timeout_s
            return self._get(self.workers[index].generate.remote(groups_ref, shard, spec, self.version), deadline)
        except Exception as error:
            if (cause := user_error_inside(error)) is not None:  # the shard itself is bad, not the worker
                raise cause from None
            raise RolloutWorkerError(
                f"rollout worker {index} failed again after a restart ({_reason(error)}); first "
                f"failure: {_reason(first_error)}"
            ) from error

    def worker_pids(self) -> list[int]:
        import ray

        return ray.get([worker.pid.remote() for worker in self.workers], timeout=self.start_timeout_s)

    def close(self) -> None:
        import ray

        if ray.is_initialized():  # after a shutdown the actors are gone; never auto-start Ray here
            for worker in self.workers:
                ray.kill(worker, no_restart=True)
        self.workers = []
        if self.owns_ray:
            ray.shutdown()
