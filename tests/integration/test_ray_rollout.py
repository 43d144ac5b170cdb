"""Ray rollout on a tiny SD3 pipeline: equivalence with the in-process engine (whole, and shard
by shard through `generate_chunks`), verified weight sync, a killed worker survived, a
twice-dead worker failing the step, cross-node via RAY_ADDRESS.

One module-scoped local Ray (2 CPUs, loopback) and one 2-worker engine serve most tests; the
cross-node test runs last, after that session is shut down, against a loopback head it
starts itself (`ray start --head --block`, stopped by its own pid).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from support import ray_overrides, ray_rollout_setting

from genalign.data.prompts import load_manifest
from genalign.data.sampler import PromptSampler
from genalign.finite import NonFiniteError
from genalign.preflight.load import load_config
from genalign.rollout.batch import TrajectoryBatch, cat_batches
from genalign.rollout.engine import LocalRolloutEngine
from genalign.rollout.ray_engine import RayRolloutEngine, RolloutWorkerError, shard_positions
from genalign.training import setup
from genalign.weights.lora import load_trainable_state_dict, trainable_state_dict

pytestmark = pytest.mark.ray
RECIPE = "experiment/diffusion/sd3_5/online_grpo_ocr"
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")


@pytest.fixture(scope="module")
def prompts_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("prompts") / "train.txt"
    path.write_text('a sign that says "ray"\na red cube\na poster reading "sync"\na blue circle\n')
    return path


def assert_batches_equal(a: TrajectoryBatch, b: TrajectoryBatch) -> None:
    assert a.prompts == b.prompts and a.metadata == b.metadata
    for name in ["prompt_ids", "group_ids", "seeds", "latents", "log_probs", "sigmas", "sde_mask", "images"]:
        assert torch.equal(getattr(a, name), getattr(b, name)), name
    for name in ["embeds", "pooled", "negative_embeds", "negative_pooled"]:
        x, y = getattr(a.condition, name), getattr(b.condition, name)
        assert (x is None and y is None) or torch.equal(x, y), name


@pytest.fixture(scope="module")
def ray_session():
    import ray

    from genalign.ray_session import init_ray

    init_ray(num_cpus=2, log_to_driver=False)
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def setting(tiny_sd3_dir, prompts_file, ray_session):
    cfg = load_config(
        RECIPE,
        ray_overrides(
            tiny_sd3_dir,
            prompts_file,
            "/base/distributed=ray_rollout",
            "rollout.num_workers=2",
            "distributed.resources.rollout.num_workers=2",
        ),
    )
    policy, sampler, engine = ray_rollout_setting(cfg)
    yield cfg, policy, sampler, engine
    engine.close()


def test_shards_cut_at_group_and_chunk_boundaries():
    assert shard_positions(8, 4, 2) == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert shard_positions(6, 2, 2) == [[0, 1, 2, 3], [4, 5]]
    assert shard_positions(2, 2, 2) == [[0, 1], []]
    with pytest.raises(ValueError, match="shard unit"):
        shard_positions(6, 4, 2)


def test_two_workers_equal_in_process_bitwise_and_after_sync(setting):
    cfg, policy, sampler, engine = setting
    spec = setup.rollout_spec(cfg)
    groups = sampler.sample(1)
    local = LocalRolloutEngine(policy).generate(groups, spec)
    assert_batches_equal(engine.generate(groups, spec), local)
    chunks = list(engine.generate_chunks(groups, spec))  # each worker's shard as it arrives, in order
    assert [len(chunk) for chunk in chunks] == [2, 2]
    assert_batches_equal(cat_batches(chunks), local)

    with torch.no_grad():  # an "optimizer round": new LoRA weights, pushed as version 1
        for name, param in policy.transformer.named_parameters():
            if param.requires_grad:
                param.add_(0.05 * torch.randn_like(param))
    metrics = engine.sync(trainable_state_dict(policy.transformer), version=1)
    state_bytes = sum(t.numel() * t.element_size() for t in trainable_state_dict(policy.transformer).values())
    assert metrics["sync_bytes"] == 2 * state_bytes and metrics["sync_s"] > 0
    assert all("lora" in name for name in trainable_state_dict(policy.transformer))
    groups = sampler.sample(2)
    local = LocalRolloutEngine(policy).generate(groups, spec)
    assert_batches_equal(engine.generate(groups, spec), local)


def test_per_batch_sde_windows_equal_in_process_bitwise(setting):
    """Flow-GRPO-Fast windows are drawn per sampling batch from (seed, step, batch position):
    each worker samples one of the step's two chunks, with the window the in-process engine draws."""
    import dataclasses

    from genalign.sampling.windows import WindowSchedule

    cfg, policy, sampler, engine = setting
    window = WindowSchedule("random", 1, 0, 2, seed=cfg.trainer.seed)  # one SDE step of the 2
    step = next(s for s in range(1, 50) if window.bounds(s, 0) != window.bounds(s, 2))
    spec = dataclasses.replace(setup.rollout_spec(cfg), window=window).at_step(step)
    groups = sampler.sample(step)
    batch = engine.generate(groups, spec)
    assert_batches_equal(batch, LocalRolloutEngine(policy).generate(groups, spec))
    assert not torch.equal(batch.sde_mask[0], batch.sde_mask[2])  # the two sampling batches' windows differ
    assert torch.equal(batch.sde_mask[0], batch.sde_mask[1]) and torch.equal(batch.sde_mask[2], batch.sde_mask[3])


def test_sa_solver_rollout_equals_in_process_bitwise(setting):
    """rollout.sampler=sa_solver through the workers: each sample's solver noise comes from its own
    generator, so a worker's shard is bitwise the in-process engine's samples."""
    import dataclasses

    from genalign.rollout.config import SASolverConfig

    cfg, policy, sampler, engine = setting
    solver = SASolverConfig(tau=0.7, tau_sigma_min=0.0, tau_sigma_max=1.0)
    spec = dataclasses.replace(setup.rollout_spec(cfg), noise_level=0.0, sa_solver=solver)
    groups = sampler.sample(3)
    batch = engine.generate(groups, spec)
    assert batch.kernel == "sa_solver" and (batch.log_probs == 0).all()
    assert_batches_equal(batch, LocalRolloutEngine(policy).generate(groups, spec))


def test_fingerprint_mismatch_names_the_worker(setting):
    _, policy, _, engine = setting
    state = trainable_state_dict(policy.transformer)
    # float64 tensors load into the workers' float32 adapters: what they hold is not what was sent
    with pytest.raises(RolloutWorkerError, match=r"rollout worker 0: weight fingerprint .* differs"):
        engine.sync({k: v.double() for k, v in state.items()}, version=3)
    # an adapter that bound to other modules: names do not match
    renamed = {k.replace("lora_A", "lora_Q"): v for k, v in state.items()}
    with pytest.raises(RolloutWorkerError, match=r"rollout worker 0 failed to load policy version 4.*missing"):
        engine.sync(renamed, version=4)
    engine.sync(state, version=5)  # a good sync restores a consistent state


def test_non_finite_samples_in_a_worker_give_the_in_process_error(setting):
    """A NaN in the synced weights: the worker's NonFiniteError reaches the caller unwrapped from
    Ray's RayTaskError, with the same one-line message as the in-process engine."""
    cfg, policy, sampler, engine = setting
    spec = setup.rollout_spec(cfg)
    good = {name: tensor.clone() for name, tensor in trainable_state_dict(policy.transformer).items()}
    poisoned = {name: tensor.clone() for name, tensor in good.items()}
    poisoned[next(name for name in poisoned if "lora_B" in name)].fill_(float("nan"))
    groups = sampler.sample(5)
    engine.sync(poisoned, version=50)
    try:
        with pytest.raises(NonFiniteError) as remote:
            engine.generate(groups, spec)
        with torch.no_grad():
            load_trainable_state_dict(policy.transformer, poisoned)
        with pytest.raises(NonFiniteError) as local:
            LocalRolloutEngine(policy).generate(groups, spec)
    finally:
        with torch.no_grad():
            load_trainable_state_dict(policy.transformer, good)
        engine.sync(good, version=51)
    assert type(remote.value) is NonFiniteError and "\n" not in str(remote.value)
    assert str(remote.value) == str(local.value) and "sampling produced non-finite latents" in str(remote.value)


def test_killed_worker_is_restarted_and_its_shard_regenerated(setting):
    cfg, policy, sampler, engine = setting
    spec = setup.rollout_spec(cfg)
    engine.sync(trainable_state_dict(policy.transformer), version=6)
    old_pid = engine.worker_pids()[1]
    os.kill(old_pid, signal.SIGKILL)
    groups = sampler.sample(3)
    batch = engine.generate(groups, spec)
    assert_batches_equal(batch, LocalRolloutEngine(policy).generate(groups, spec))
    assert engine.worker_pids()[1] != old_pid


def test_second_death_fails_the_step_in_bounded_time(setting, monkeypatch):
    import ray

    cfg, _, sampler, engine = setting
    start_worker = engine._start_worker

    def start_and_kill(index):  # the replacement dies too
        actor = start_worker(index)
        ray.kill(actor, no_restart=True)
        return actor

    monkeypatch.setattr(engine, "_start_worker", start_and_kill)
    ray.kill(engine.workers[0], no_restart=True)
    began = time.monotonic()
    with pytest.raises(RolloutWorkerError, match="rollout worker 0 failed again after a restart"):
        engine.generate(sampler.sample(4), setup.rollout_spec(cfg))
    assert time.monotonic() - began < 600  # a hang guard only: the message shows it was no timeout


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_cross_node_preset_joins_the_cluster_at_ray_address(tiny_sd3_dir, prompts_file, ray_session, monkeypatch):
    import ray

    ray.shutdown()  # leave the module's private instance; join an "existing cluster" instead
    port = _free_port()
    ray_cli = Path(sys.executable).parent / "ray"
    head = subprocess.Popen(
        [
            str(ray_cli),
            "start",
            "--head",
            "--block",
            f"--port={port}",
            "--num-cpus=2",
            "--num-gpus=0",
            "--node-ip-address=127.0.0.1",
            "--include-dashboard=false",
            "--disable-usage-stats",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        monkeypatch.setenv("RAY_ADDRESS", f"127.0.0.1:{port}")
        cfg = load_config(
            RECIPE,
            ray_overrides(
                tiny_sd3_dir,
                prompts_file,
                "/base/distributed=ray_rollout_cross_node",
                "distributed.resources.rollout.num_gpus=0",
            ),
        )
        torch.manual_seed(cfg.trainer.seed)
        policy = setup.build_policy(cfg)
        deadline = time.monotonic() + 300
        while True:  # the head takes a few seconds to accept drivers (longer on a loaded box)
            try:
                engine = RayRolloutEngine(
                    cfg, trainable_state_dict(policy.transformer), setup.build_policy, generate_timeout_s=120
                )
                break
            except ConnectionError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(1)
        try:
            assert ray.get_runtime_context().gcs_address.endswith(f":{port}")
            groups = PromptSampler(load_manifest(cfg.data.manifest), 2, 2, cfg.trainer.seed).sample(1)
            spec = setup.rollout_spec(cfg)
            assert_batches_equal(engine.generate(groups, spec), LocalRolloutEngine(policy).generate(groups, spec))
        finally:
            engine.close()
    finally:
        head.send_signal(signal.SIGTERM)
        head.wait(timeout=60)
