"""Evaluation sharded over 2 gloo ranks with uneven shards gathers every sample exactly once.

The core (`evaluate_samples` with `gather_to_main`): 5 samples over 2 ranks (3 + 2) and 1 sample
(rank 1's shard is empty: it samples a filler and still enters every gather); rank 0 must get
samples 0..n-1 once each, in order, with their own scores. Then the real command under torchrun:
`genalign eval` of the CPU demo's base model on 3 prompts (2 + 1) writes each sample once."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.distributed
HANG_BOUND_S = 420
"""A rank stuck in a collective would wait the process-group timeout: the bound turns it into a failure."""

SCRIPT = r"""
import json, sys, torch
from genalign.data.sampler import PromptGroupBatch
from genalign.evaluation.sharded import evaluate_samples
from genalign.rewards.scores import RewardScores
from genalign.training import distributed as dist
from genalign.training.setup import evaluation_shard

info = dist.init_distributed("ddp", backend="gloo", timeout_s=3600)

class Batch:
    def __init__(self, images, prompts):
        self.images, self.prompts, self.metadata = images, prompts, [{} for _ in prompts]

class Runtime:
    def score(self, images, prompts, metadata):
        return RewardScores({"value": images.float().mean((1, 2, 3)) + 0.5}, {"value": 1.0})

results = {}
for total in (5, 1):
    samples = PromptGroupBatch([f"p{i}" for i in range(total)], torch.arange(total), torch.arange(total),
                               torch.arange(total), [{} for _ in range(total)])
    seen = []
    def sample(every, positions):
        seen.append(list(positions))
        return Batch(torch.stack([torch.full((3, 4, 4), i, dtype=torch.uint8) for i in positions]),
                     [every.prompts[i] for i in positions])
    outcome = evaluate_samples(sample, samples, {"r": Runtime()}, evaluation_shard(info))
    results[total] = {"seen": seen, "images": None if outcome.images is None else outcome.images[:, 0, 0, 0].tolist(),
                      "scores": None if outcome.scores is None else outcome.scores["r"].total.tolist()}
json.dump(results, open(f"{sys.argv[1]}/rank{info.rank}.json", "w"))
dist.shutdown()
"""


def torchrun(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "GLOO_SOCKET_IFNAME": "lo", "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", *args]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=HANG_BOUND_S, cwd=cwd)


def test_uneven_shards_are_gathered_once_each_in_order(tmp_path):
    script = tmp_path / "eval_ranks.py"
    script.write_text(SCRIPT)
    done = torchrun(str(script), str(tmp_path))
    assert done.returncode == 0, done.stderr[-3000:]
    rank0, rank1 = (json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1))
    for total in ("5", "1"):
        n = int(total)
        assert rank0[total]["images"] == list(range(n))  # every sample once, in order
        assert rank0[total]["scores"] == [i + 0.5 for i in range(n)]
        assert rank1[total]["images"] is None and rank1[total]["scores"] is None
        # both ranks sampled as many (rank 1 a filler when its shard is short or empty)
        assert len(rank0[total]["seen"][0]) == len(rank1[total]["seen"][0])
    assert rank0["5"]["seen"] == [[0, 1, 2]] and rank1["5"]["seen"] == [[3, 4, 4]]
    assert rank1["1"]["seen"] == [[0]]  # an empty shard samples a filler and enters every gather


def test_genalign_eval_under_torchrun_writes_each_sample_once(tmp_path):
    out = tmp_path / "eval"
    done = torchrun(
        "-m",
        "genalign",
        "eval",
        "--model",
        "base",
        "--benchmark",
        "toy",
        "--output-dir",
        str(out),
        "eval.max_prompts=3",
        "eval.samples_per_prompt=1",
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    assert [row["index"] for row in rows] == [0, 1, 2]
    assert [row["prompt"] for row in rows] == ["an orange circle", "an orange square", "an orange triangle"]
    assert json.loads((out / "summary.json").read_text())["settings"]["ranks"] == 2


@pytest.mark.ray
@pytest.mark.slow
def test_genalign_eval_over_ray_workers_equals_in_process(tmp_path, monkeypatch):
    """2 Ray rollout workers: 3 prompts x 4 images in chunks of 8 are completed with one filler
    group to whole shard units (2 x 8); the fillers are dropped and every sample's scores equal
    the in-process evaluation's (the Ray engine's shards are bitwise the in-process samples)."""
    from genalign.cli import main

    monkeypatch.setenv("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    common = [
        "--model",
        "base",
        "--benchmark",
        "toy",
        "eval.max_prompts=3",
        "eval.samples_per_prompt=4",
        "eval.batch_size=8",
    ]
    assert main(["eval", *common, "--output-dir", str(tmp_path / "local")]) == 0
    assert (
        main(
            [
                "eval",
                *common,
                "--output-dir",
                str(tmp_path / "ray"),
                "rollout.engine=ray",
                "rollout.num_workers=2",
                "distributed.resources.rollout.num_workers=2",
            ]
        )
        == 0
    )
    import ray

    assert not ray.is_initialized()  # the Ray the evaluation started ends with it (the caller goes on in-process)
    rows = {
        name: [json.loads(line) for line in (tmp_path / name / "samples.jsonl").read_text().splitlines()]
        for name in ("local", "ray")
    }
    assert [row["index"] for row in rows["ray"]] == list(range(12))
    assert [row["scores"] for row in rows["ray"]] == [row["scores"] for row in rows["local"]]
