"""benchmarks/bench_reward_service.py: a small, bounded loopback load test of the reward service."""

import importlib.util
import sys
from pathlib import Path

import pytest

PATH = Path(__file__).resolve().parents[3] / "benchmarks" / "bench_reward_service.py"
spec = importlib.util.spec_from_file_location("bench_reward_service", PATH)
bench = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = bench
spec.loader.exec_module(bench)


def test_percentile_is_nearest_rank():
    values = [float(v) for v in range(1, 101)]
    assert bench.percentile(values, 50) == 50 and bench.percentile(values, 99) == 99
    assert bench.percentile(values, 100) == 100 and bench.percentile([3.0], 99) == 3.0


def test_concurrent_clients_are_all_served_and_measured(monkeypatch):
    from genalign.rewards.serve_command import build_service
    from genalign.rewards.server import BackgroundServer, ServeOptions

    monkeypatch.setenv("GENALIGN_REWARD_TOKEN", "load-test")
    server = BackgroundServer(
        build_service(["jpeg_compressibility"], ["reward.batch_size=8"], ServeOptions(port=0, max_queue=2)).app()
    )
    try:  # 4 clients x 5 calls into a queue of 2: back-pressure, every call still answered
        figures = bench.load_test(
            server.url, ["jpeg_compressibility"], clients=4, requests=5, batch=2, size=32, timeout_s=60.0
        )
    finally:
        server.stop()
    assert figures["requests"] == 20
    assert 0 < figures["p50_ms"] <= figures["p99_ms"] <= figures["max_ms"]
    assert figures["requests_per_s"] > 0 and figures["images_per_s"] == pytest.approx(2 * figures["requests_per_s"])
