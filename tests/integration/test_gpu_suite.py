"""The GPU benchmarks cannot rot: the default suite runs them at tiny shapes on the CPU, the way
the GPU machine runs them (the scripts as subprocesses), and reads what they write.

`benchmarks/gpu_suite.py --tiny`: every registered model family's recipe (a family added later
is in it without an edit), the comparison with Flow-GRPO's loop (when its files are prepared,
else skipped with the reason), the rollout profile; the JSON and the markdown table, and the
docs section generated from the JSON. `benchmarks/bench_gpu_step.py`: its CPU fallback."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from genalign.models.registry import MODEL_FAMILIES

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from benchmarks import flow_grpo_reference as reference  # noqa: E402
from benchmarks.gpu_suite_report import BEGIN, END, merge, render, update_docs  # noqa: E402

TIMEOUT_S = 3000
"""Generous: the suite takes under a minute on an idle 2-core box; never a timing assertion."""


@pytest.fixture(scope="module")
def tiny_suite(tmp_path_factory):
    out = tmp_path_factory.mktemp("gpu_suite")
    run = subprocess.run(
        [
            sys.executable,
            str(REPO / "benchmarks" / "gpu_suite.py"),
            "--tiny",
            "--out",
            str(out),
            "--budget-s",
            str(TIMEOUT_S),
        ],
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S + 60,
    )
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    return out, json.loads((out / "gpu_suite.json").read_text()), run.stdout


def test_every_registered_family_trains_two_finite_on_policy_steps(tiny_suite):
    _, report, _ = tiny_suite
    items = {item["key"]: item for item in report["items"]}
    assert report["mode"] == "tiny" and report["card"]["name"].startswith("CPU")
    for family in MODEL_FAMILIES.names():
        item = items[family]
        assert item["status"] == "ok", item
        assert [step["step"] for step in item["steps"]] == [1, 2]
        assert item["parity"] == 0.0 and item["finite"] is True and item["images_per_s"] > 0
        assert item["settings"]["dtype"] == "float32" and item["shrunk"] == ["tiny shapes"]


def test_wan_2_2_forms_run_their_own_tiny_models_and_recipes(tiny_suite):
    """Wan 2.2's variants are their own items at tiny shapes too (two experts; TI2V-5B's VAE;
    I2V-A14B's two image-conditioned experts; TI2V-5B's image-to-video; Wan 2.1 FLF2V's two frames):
    their recipes, two finite steps at parity 0; SD3.5 Large's tiny item would be SD3's again."""
    _, report, _ = tiny_suite
    items = {item["key"]: item for item in report["items"]}
    for key in ("wan2_2_t2v_a14b", "wan2_2_ti2v_5b", "wan2_2_i2v_a14b", "wan2_2_ti2v_5b_i2v", "wan2_1_flf2v"):
        item = items[key]
        assert item["status"] == "ok" and item["parity"] == 0.0 and item["finite"] is True, item
        assert [step["step"] for step in item["steps"]] == [1, 2]
    assert items["sd3_5_large"]["status"] == "skipped"


def test_the_time_plan_comes_first_and_every_item_is_accounted_for(tiny_suite):
    out, report, stdout = tiny_suite
    lines = stdout.splitlines()
    assert lines[0].startswith("GPU suite on CPU") and lines[0].endswith("time plan:")
    planned = [line.split()[1] for line in lines[1:] if line.startswith("  [")]
    assert planned == [item["key"] for item in report["items"]]
    for item in report["items"]:  # ran, or says why not
        assert item["status"] == "ok" or (item["status"] == "skipped" and item["reason"]), item
    table = (out / "gpu_suite.md").read_text()
    assert table.startswith(f"#### GPU suite on {report['card']['name']}")
    assert all(f"| {item['title']} |" in table for item in report["items"])


def test_comparison_with_flow_grpo_and_rollout_profile(tiny_suite):
    _, report, _ = tiny_suite
    items = {item["key"]: item for item in report["items"]}
    assert items["genalign"]["status"] == "ok" and items["genalign"]["settings"]["group"] == reference.TINY.group
    flow_grpo, missing = items["flow_grpo"], reference.missing()
    if missing is None:  # prepared (benchmarks/prepare_gpu.sh): the reference's own loop ran
        assert flow_grpo["status"] == "ok" and flow_grpo["commit"] == reference.prepared_commit()
        assert len(flow_grpo["epoch_s"]) == flow_grpo["steps"] and flow_grpo["images_per_s"] > 0
        assert report["ratios"]["genalign, same settings / Flow-GRPO"] > 0
    else:
        assert flow_grpo["status"] == "skipped" and flow_grpo["reason"] == missing
    profile = items["rollout_profile"]["profile"]
    assert 0 < profile["transformer_s"] < profile["rollout_s"] and profile["vae_decode_s"] > 0
    assert profile["other_s"] == pytest.approx(
        profile["rollout_s"] - profile["transformer_s"] - profile["vae_decode_s"] - profile["text_encoders_s"]
    )


def test_docs_section_is_generated_from_the_json(tiny_suite, tmp_path):
    _, report, _ = tiny_suite
    docs = (REPO / "docs" / "benchmarks.md").read_text()
    page = tmp_path / "benchmarks.md"
    page.write_text(docs)
    update_docs(page, report)
    head, rest = page.read_text().split(BEGIN)
    generated, tail = rest.split(END)
    assert head == docs.split(BEGIN)[0] and tail == docs.split(END)[1]
    assert f"GPU suite on {report['card']['name']}" in generated


def test_reruns_of_one_card_merge_into_one_report():
    """A full run, then `--only` reruns of what failed or was left out: each item from the last
    run that ran it, each ratio from the run that measured both sides, the run named per row."""

    def run(items, ratios=None, card="H100"):
        return {
            "mode": "real",
            "card": {"name": card},
            "budget_s": 100.0,
            "elapsed_s": 50.0,
            "items": [{"key": k, "section": 1, "title": k, "status": st} for k, st in items],
            "ratios": ratios or {},
        }

    first = run([("sd3", "failed"), ("wan", "ok"), ("janus", "skipped")])
    second = run([("sd3", "ok"), ("wan", "skipped")], {"genalign, same settings / Flow-GRPO": 1.1})
    merged = merge([first, second])
    by_key = {item["key"]: item for item in merged["items"]}
    assert [item["key"] for item in merged["items"]] == ["sd3", "wan", "janus"]
    assert (by_key["sd3"]["status"], by_key["sd3"]["run"]) == ("ok", 2)
    assert (by_key["wan"]["status"], by_key["wan"]["run"]) == ("ok", 1)  # a skip never replaces a result
    assert by_key["janus"]["run"] == 1 and merged["ratios"] == second["ratios"]
    assert merged["elapsed_s"] == 100.0 and [r["only"] for r in merged["runs"]] == [["sd3", "wan"], ["sd3"]]
    assert "| sd3 | ok (run 2) |" in render(merged)
    assert merge([first]) is first
    with pytest.raises(ValueError, match="different cards"):
        merge([first, run([("sd3", "ok")], card="H200")])


def test_bench_gpu_step_runs_at_tiny_shapes_on_the_cpu():
    run = subprocess.run(
        [
            sys.executable,
            str(REPO / "benchmarks" / "bench_gpu_step.py"),
            "--steps",
            "1",
            "--warmup",
            "0",
            "--modes",
            "eager",
            "rollout.n=2",
            "rollout.sample_batch_size=2",
        ],
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    assert "tiny shapes" in run.stdout and "parity=0 " in run.stdout
    assert any(line.startswith("eager ") for line in run.stdout.splitlines())


def _run_script(script: str, threads: int) -> subprocess.CompletedProcess:
    """`script` in a fresh Python with OMP_NUM_THREADS=`threads` (the tests' 1 hides a fork fault)."""
    import os

    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=TIMEOUT_S, env=env, cwd=REPO
    )


def test_items_run_after_the_parent_has_used_parallel_cpu_ops(tmp_path):
    """On the GPU machine (16 threads) every forked item hung at its first parallel CPU op once
    the parent's planning had run one: OpenMP's thread pool does not survive fork. The parent
    now plans on one thread; an item must finish here with two threads and a parent that ran a
    parallel op first (the old code stopped it at the budget after 0 of 2 steps)."""
    script = f"""
import json, sys
sys.path.insert(0, "benchmarks")
import torch, gpu_suite
torch.ones(4_000_000).sin()  # a parallel region in the parent before any item forks
gpu_suite.main(["--tiny", "--only", "toy", "--out", {str(tmp_path)!r}, "--budget-s", "600"])
"""
    run = _run_script(script, threads=2)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    (item,) = json.loads((tmp_path / "gpu_suite.json").read_text())["items"]
    assert item["status"] == "ok", item


def test_an_item_stopped_at_the_budget_reports_where_it_was(tmp_path):
    """A stopped item's JSON keeps its log's last lines, which hold every thread's stack (the
    item's own log stays on the GPU machine): here loading the item's config never returns."""
    script = f"""
import json, sys, time
from pathlib import Path
sys.path.insert(0, "benchmarks")
import gpu_suite
item = gpu_suite.Item("toy", 1, "toy", "train", recipe="experiment/toy/shapes_grpo")
def never_returns(*args):
    while True:
        time.sleep(1)
gpu_suite.load_config = never_returns  # the forked child inherits it: its first call
result = gpu_suite.run_item(item, Path({str(tmp_path)!r}) / "toy", True, 15.0)
print(json.dumps(result))
"""
    run = _run_script(script, threads=1)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    result = json.loads(run.stdout.strip().splitlines()[-1])
    assert result["status"] == "stopped" and result["reason"] == "stopped at the budget after 0 of 2 steps"
    tail = "\n".join(result["log_tail"])
    assert "most recent call first" in tail and "in never_returns" in tail, tail
