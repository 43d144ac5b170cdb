"""Load test of the reward service on loopback: requests/s and latency percentiles.

    python benchmarks/bench_reward_service.py [--clients 8] [--requests 50] [--batch 4] [--size 512]
        [--components jpeg_compressibility] [--server-batch 16] [--url URL]

Starts `genalign serve-reward`'s service in this process (or targets --url, a server you
started; the token from $GENALIGN_REWARD_TOKEN), then runs --clients concurrent clients, each
an independent `reward.runtime=http` runtime on its own thread sending --requests scoring calls
of --batch random uint8 images of --size x --size. Every call is checked (a score per sample).
Prints one JSON line: requests/s and images/s over the whole run, and p50 / p99 / max latency
of one call in milliseconds. What it measures is the service's overhead and its batching
across clients; the scorer's own cost sets the ceiling (jpeg_compressibility encodes a JPEG
per image on one CPU thread).
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import threading
import time


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile, q in [0, 100]."""
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * q // 100))  # ceil(n q / 100), at least the first
    return ordered[int(rank) - 1]


def load_test(url: str, components: list[str], clients: int, requests: int, batch: int, size: int,
              timeout_s: float = 120.0) -> dict[str, float]:
    """`clients` threads x `requests` calls of `batch` images -> throughput and latency figures."""
    import torch

    from genalign.rewards.composite import build_reward_runtime
    from genalign.rewards.config import RewardConfig

    cfg = RewardConfig(components=dict.fromkeys(components, 1.0), runtime="http", url=url, batch_size=batch,
                       timeout_s=timeout_s, startup_timeout_s=timeout_s)
    runtimes = [build_reward_runtime(cfg, "cpu") for _ in range(clients)]
    latencies: list[list[float]] = [[] for _ in range(clients)]
    errors: list[BaseException] = []
    generator = torch.Generator().manual_seed(0)
    images = torch.randint(0, 256, (batch, 3, size, size), dtype=torch.uint8, generator=generator)
    prompts = [f"a photo of object {i}" for i in range(batch)]
    barrier = threading.Barrier(clients)

    def client(index: int) -> None:
        try:
            barrier.wait(timeout=timeout_s)
            for _ in range(requests):
                start = time.perf_counter()
                scores = runtimes[index].score(images, prompts, [])
                latencies[index].append(time.perf_counter() - start)
                assert all(v.shape == (batch,) for v in scores.components.values())
        except BaseException as exc:  # noqa: BLE001 - reported after the join
            errors.append(exc)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    start = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=timeout_s * requests + 60)
    elapsed = time.perf_counter() - start
    for runtime in runtimes:
        runtime.close()
    if errors:
        raise errors[0]
    if any(thread.is_alive() for thread in threads):
        raise TimeoutError("a load-test client did not finish")
    flat = [v for per_client in latencies for v in per_client]
    return {"clients": clients, "requests": len(flat), "batch": batch, "size": size, "seconds": elapsed,
            "requests_per_s": len(flat) / elapsed, "images_per_s": len(flat) * batch / elapsed,
            "p50_ms": 1000 * percentile(flat, 50), "p99_ms": 1000 * percentile(flat, 99),
            "max_ms": 1000 * max(flat)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--requests", type=int, default=50, help="calls per client")
    parser.add_argument("--batch", type=int, default=4, help="images per call")
    parser.add_argument("--size", type=int, default=512, help="image height and width")
    parser.add_argument("--components", nargs="+", default=["jpeg_compressibility"])
    parser.add_argument("--server-batch", type=int, default=16, help="the in-process server's reward.batch_size")
    parser.add_argument("--url", default=None, help="an already running server (default: start one here)")
    args = parser.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    server = None
    if args.url is None:
        from genalign.rewards.server import BackgroundServer, ServeOptions, build_service

        os.environ.setdefault("GENALIGN_REWARD_TOKEN", secrets.token_urlsafe(16))
        service = build_service(args.components, [f"reward.batch_size={args.server_batch}"], ServeOptions(port=0))
        server = BackgroundServer(service.app())
    try:
        figures = load_test(server.url if server else args.url, args.components, args.clients, args.requests,
                            args.batch, args.size)
    finally:
        if server is not None:
            server.stop()
    print(json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in figures.items()}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
