"""Every Ray actor pool of a run, counted before anything starts; Ray is sized for all of them.

Where it fits: preflight's `validate` (through `resource_problems` here) refuses a
run whose actor pools can never be scheduled; `Trainer` and `genalign eval` call
`start_ray_for_run` before they build any reward or rollout engine, so the private Ray
instance is started once, sized for every pool. Kept apart from `resources.py` (which places
the trainer and the rollout workers on devices) so the two plans merge cleanly.

The pools of a run (each its own actors, all alive together):
- training rewards: one pool of `reward.num_workers` actors per non-zero component
  (reward.runtime=ray);
- gold rewards: one pool per non-zero `eval.gold_rewards` entry (built by the evaluator with
  the same runtime);
- quality metrics: one pool per `eval.quality_metrics` name;
- rollout workers: `rollout.num_workers` actors (rollout.engine=ray), sized by the placement.
The first Ray start used to be sized for the training rewards alone, so the gold reward's and
each quality metric's pools waited, unschedulable, for reward.startup_timeout_s (15 minutes
on a 2-CPU machine) before failing with advice to raise that timeout.

CPUs are logical in Ray: a private instance gets max(this machine's CPUs, what the pools ask
for), so every actor is placed (they mostly wait on each other). GPUs are not oversubscribed:
pools that ask for more GPUs than are visible are refused, and pools that ask for GPUs on a
machine without one (and no `$RAY_ADDRESS` cluster to provide them) are refused too.
"""

from __future__ import annotations

import logging
import math
import os
from dataclasses import dataclass

from genalign.placement import resources
from genalign.placement.resources import EnvironmentFacts
from genalign.ray_session import init_ray

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ActorPool:
    role: str
    """What the pool is, for messages: "reward 'ocr'", "gold reward 'judge'", "rollout workers"."""
    gpu_key: str
    """The config key that sets `gpus_each` (named in a refusal)."""
    actors: int
    cpus_each: float
    gpus_each: float


def ray_actor_pools(cfg, placement=None) -> list[ActorPool]:
    """The pools `cfg` starts; `placement` is the run's `Placement` (its rollout workers' actors)."""
    pools: list[ActorPool] = []
    reward = cfg.reward
    if reward.runtime == "ray":
        groups = (
            ("reward", list(reward.active_components())),
            ("gold reward", list(cfg.eval.active_gold_rewards())),
            ("quality metric", list(cfg.eval.quality_metrics)),
        )
        pools += [
            ActorPool(
                f"{label} {name!r}",
                "reward.num_gpus_per_worker",
                reward.num_workers,
                reward.num_cpus_per_worker,
                reward.num_gpus_per_worker,
            )
            for label, names in groups
            for name in names
        ]
    if placement is not None and placement.rollout is not None:
        rollout = placement.rollout
        pools.append(
            ActorPool(
                "rollout workers",
                "distributed.resources.rollout.num_gpus",
                rollout.num_workers,
                rollout.num_cpus_per_worker,
                rollout.num_gpus_per_worker,
            )
        )
    return pools


def _cluster_address(cfg, placement, environ) -> str | None:
    """The Ray cluster the run joins (None: a private local instance). The rollout engine
    joins one only for the cross-node preset; rewards alone follow `$RAY_ADDRESS`."""
    if placement is not None and placement.rollout is not None:
        return placement.ray_address
    return environ.get("RAY_ADDRESS") or None


def ray_pool_problems(cfg, placement, visible_gpus: tuple[int, ...], environ=os.environ) -> list[str]:
    """Why the pools could never all be scheduled (empty when they can), before anything starts."""
    pools = ray_actor_pools(cfg, placement)
    if not pools or _cluster_address(cfg, placement, environ) is not None:
        return []  # a cluster's capacity is the cluster's to know
    problems = []
    reward_gpu = [pool for pool in pools if pool.gpus_each > 0 and pool.role != "rollout workers"]
    if reward_gpu and not visible_gpus:
        roles = ", ".join(pool.role for pool in reward_gpu)
        problems.append(
            f"reward.num_gpus_per_worker={reward_gpu[0].gpus_each:g} but this machine has no visible GPU "
            f"and no Ray cluster ($RAY_ADDRESS): the actors of {roles} could never start; set "
            "reward.num_gpus_per_worker=0"
        )
    elif reward_gpu:
        rollout_gpus = placement.ray_num_gpus if placement is not None and placement.rollout is not None else 0.0
        wanted = sum(pool.actors * pool.gpus_each for pool in reward_gpu) + rollout_gpus
        if wanted > len(visible_gpus) + 1e-9:
            detail = "; ".join(f"{pool.role}: {pool.actors} x {pool.gpus_each:g}" for pool in reward_gpu)
            rollout = f"; rollout workers: {rollout_gpus:g}" if rollout_gpus else ""
            problems.append(
                f"the Ray actor pools ask for {wanted:g} GPUs ({detail}{rollout}) but "
                f"{len(visible_gpus)} are visible; lower reward.num_gpus_per_worker (fractions share a "
                "GPU) or reward.num_workers"
            )
    return problems


def resource_problems(cfg, facts: EnvironmentFacts | None = None) -> list[str]:
    """Every placement problem of a run, as text: the trainer and rollout workers on devices,
    then every Ray actor pool (preflight's `validate` calls it)."""
    facts = facts if facts is not None else resources.environment_facts()
    placement, problems = resources.plan_resources(
        cfg.distributed, cfg.rollout.engine, cfg.rollout.num_workers, cfg.distributed.training.strategy, facts
    )
    return problems or ray_pool_problems(cfg, placement, facts.visible_gpus)  # every Ray actor pool, counted


def ray_start_options(
    cfg, placement, visible_gpus: tuple[int, ...], cpu_count: int, environ=os.environ
) -> tuple[str | None, dict]:
    """(cluster address or None, ray.init options) for a run's pools: a private instance gets
    enough logical CPUs for every pool and the GPUs they ask for."""
    address = _cluster_address(cfg, placement, environ)
    if address is not None:
        return address, {}
    pools = ray_actor_pools(cfg, placement)
    cpus = sum(pool.actors * pool.cpus_each for pool in pools)
    reward_gpus = any(pool.gpus_each > 0 for pool in pools if pool.role != "rollout workers")
    rollout_gpus = placement.ray_num_gpus if placement is not None and placement.rollout is not None else 0.0
    gpus = float(len(visible_gpus)) if reward_gpus else rollout_gpus
    return None, {"num_cpus": max(cpu_count, math.ceil(cpus)), "num_gpus": gpus}


def start_ray_for_run(cfg) -> bool:
    """Start (or join) Ray once, sized for every pool of the run, unless it runs none or Ray
    is already up. True when this call started it (the caller then shuts it down)."""
    placement = resources.resolve_resources(cfg)
    pools = ray_actor_pools(cfg, placement)
    if not pools:
        return False
    import ray

    if ray.is_initialized():
        return False

    facts = resources.environment_facts()
    address, options = ray_start_options(cfg, placement, facts.visible_gpus, os.cpu_count() or 1)
    log.info(
        "ray: %d actor pool(s) (%s) asking for %g CPU(s) / %g GPU(s) in all; %s",
        len(pools),
        ", ".join(f"{pool.role} x{pool.actors}" for pool in pools),
        sum(p.actors * p.cpus_each for p in pools),
        sum(p.actors * p.gpus_each for p in pools),
        f"joining {address}" if address else f"starting a local instance with {options}",
    )
    init_ray(address, log_to_driver=True, **options)
    return True


def stop_ray_for_run(started: bool) -> None:
    """Shut Ray down when `start_ray_for_run` started it (a Ray the user started stays up)."""
    if started:
        import ray  # lazy: Ray loads only in runs that use it

        ray.shutdown()
