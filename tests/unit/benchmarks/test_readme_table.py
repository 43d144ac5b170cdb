"""benchmarks/bench_default_run.py --readme: the README's demo table rewritten from a run's
eval_metrics.csv rows, with the line saying where and how it was measured (idempotent)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def bench():
    spec = importlib.util.spec_from_file_location("bench_default_run", ROOT / "benchmarks" / "bench_default_run.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_readme_table_is_replaced_by_the_runs_rows_once():
    module = bench()
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    row = {
        "eval_reward_mean": "0.45321",
        "gold_mean": "0.4703",
        "gold_divergence": "0.0",
        "quality_toy_off_shape_fraction_mean": "0.0",
        "quality_toy_background_deviation_mean": "5.4181",
        "quality_toy_shape_area_mean": "0.3441",
    }
    evals = [{**row, "step": "0"}, {**row, "step": "60", "eval_reward_mean": "0.8721"}]
    once = module.with_demo_table(readme, evals, threads=2)
    assert module.with_demo_table(once, evals, threads=2) == once  # a rerun replaces, never appends
    assert "| 0 | 0.453 | 0.470 | 0 | 0.0000 | 5.42 | 0.344 |\n| 60 | 0.872 | 0.470 |" in once
    assert "| 20 |" not in once and once.count(module.README_HEADER) == 1
    note = once[once.index(module.MEASURED) :].split("\n\n")[0]
    assert "2\nthreads" in note or "2 threads" in note
    assert "depend on the CPU" in note.replace("\n", " ")
