"""Load and abuse test of the reward service on loopback: valid clients' latency with and without attackers.

    python benchmarks/bench_reward_service.py [--clients 4] [--rate 2] [--seconds 20] [--batch 4] [--size 64]
        [--components jpeg_compressibility] [--server-batch 16] [--url URL]
    python benchmarks/bench_reward_service.py --closed-loop [--clients 8] [--requests 50] ...

Starts `genalign serve-reward` in its own process (or targets --url, a server you started;
the token from $GENALIGN_REWARD_TOKEN). Valid clients, each an independent
`reward.runtime=http` runtime (what a trainer uses) on its own thread, send scoring calls of
--batch random uint8 images at a steady --rate per second for --seconds; a call's latency is
measured from the moment it was due (so a server that falls behind shows it, rather than
slowing the clients down). The same valid traffic runs twice: alone ("clean"), then while
attackers, each from its own loopback address (127.0.0.2-5: the server throttles and shares
per address), do at the same time:

* giant: a token-holding client sending requests of --giant-images images (its server's
  whole body limit if you like), half of them abandoned a moment after sending;
* slowloris: --slowloris connections that send a header line a second and never finish;
* oversized and malformed: Content-Length 10^12, truncated bodies, bodies that are not
  safetensors, a 100 000-deep JSON header;
* wrong tokens: GET /v1/info with random tokens, as fast as answers come.

Prints one JSON line: each run's valid requests, failures, p50 / p99 / max latency in ms, the
p99 ratio attacked / clean, and what the attackers got (status counts, connections the server
closed). Done means no valid request fails and the ratio is a small number. `--closed-loop`
runs the plain throughput test instead (each client sends its next call when the last one
returns: requests/s, images/s, latency). The scorer's own cost sets the ceiling
(jpeg_compressibility encodes a JPEG per image on one CPU thread).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import secrets
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass
from urllib.parse import urlsplit

ATTACKER_ADDRESSES = {"giant": "127.0.0.2", "slowloris": "127.0.0.3", "malformed": "127.0.0.4", "tokens": "127.0.0.5"}
"""Linux routes all of 127.0.0.0/8 to loopback: each attacker is its own client address."""


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile, q in [0, 100]."""
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * q // 100))  # ceil(n q / 100), at least the first
    return ordered[int(rank) - 1]


def _runtimes(url: str, components: list[str], clients: int, batch: int, timeout_s: float) -> list:
    from genalign.rewards.composite import build_reward_runtime
    from genalign.rewards.config import RewardConfig

    cfg = RewardConfig(
        components=dict.fromkeys(components, 1.0),
        runtime="http",
        url=url,
        batch_size=batch,
        timeout_s=timeout_s,
        startup_timeout_s=timeout_s,
    )
    return [build_reward_runtime(cfg, "cpu") for _ in range(clients)]


def _batch(batch: int, size: int):
    import torch

    generator = torch.Generator().manual_seed(0)
    images = torch.randint(0, 256, (batch, 3, size, size), dtype=torch.uint8, generator=generator)
    return images, [f"a photo of object {i}" for i in range(batch)]


def load_test(
    url: str, components: list[str], clients: int, requests: int, batch: int, size: int, timeout_s: float = 120.0
) -> dict[str, float]:
    """Closed loop: `clients` threads x `requests` calls of `batch` images, each call sent when
    the last returned -> throughput and latency figures."""
    runtimes = _runtimes(url, components, clients, batch, timeout_s)
    latencies: list[list[float]] = [[] for _ in range(clients)]
    errors: list[BaseException] = []
    images, prompts = _batch(batch, size)
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
    return {
        "clients": clients,
        "requests": len(flat),
        "batch": batch,
        "size": size,
        "seconds": elapsed,
        "requests_per_s": len(flat) / elapsed,
        "images_per_s": len(flat) * batch / elapsed,
        "p50_ms": 1000 * percentile(flat, 50),
        "p99_ms": 1000 * percentile(flat, 99),
        "max_ms": 1000 * max(flat),
    }


# ---------------------------------------------------------------- valid traffic at a steady rate
def steady_traffic(
    url: str,
    components: list[str],
    clients: int,
    rate_per_s: float,
    seconds: float,
    batch: int,
    size: int,
    timeout_s: float = 120.0,
) -> dict:
    """`clients` trainers each sending a call of `batch` images every 1/rate_per_s seconds for
    `seconds`; latency from the moment each call was due. Every answer is checked."""
    runtimes = _runtimes(url, components, clients, batch, timeout_s)
    images, prompts = _batch(batch, size)
    period_s, count = 1.0 / rate_per_s, max(1, int(seconds * rate_per_s))
    latencies: list[float] = []
    failures: list[str] = []
    start_at = time.monotonic() + 0.5

    def client(index: int) -> None:
        offset = index * period_s / clients  # clients spread over the period, as independent trainers are
        for i in range(count):
            due = start_at + offset + i * period_s
            time.sleep(max(0.0, due - time.monotonic()))
            try:
                scores = runtimes[index].score(images, prompts, [])
                if not all(v.shape == (batch,) for v in scores.components.values()):
                    raise ValueError("a reply without a score per image")
                latencies.append(time.monotonic() - due)
            except Exception as exc:  # noqa: BLE001 - every failure is reported, none stops the run
                failures.append(f"{type(exc).__name__}: {exc}"[:300])

    threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=seconds + count * timeout_s + 60)
    for runtime in runtimes:
        runtime.close()
    answered = sorted(latencies)
    return {
        "requests": clients * count,
        "answered": len(answered),
        "failed": len(failures),
        "failures": failures[:3],
        "p50_ms": round(1000 * percentile(answered, 50), 1) if answered else None,
        "p99_ms": round(1000 * percentile(answered, 99), 1) if answered else None,
        "max_ms": round(1000 * answered[-1], 1) if answered else None,
    }


# ---------------------------------------------------------------- attackers
class Attack:
    """Each attacker in its own process (as on its own machine: it takes no time from the valid
    clients' threads in this one) against the server at `url` until `stop()`; `report()` says
    what they got."""

    def __init__(
        self,
        url: str,
        token: str,
        components: list[str],
        giant_images: int,
        slowloris: int,
        size: int = 64,
        kinds: tuple[str, ...] = tuple(ATTACKER_ADDRESSES),
    ):
        parts = urlsplit(url)
        attacker = Attacker((parts.hostname, parts.port), token, components, giant_images, slowloris, size)
        self.kinds = kinds
        context = multiprocessing.get_context("spawn")  # never fork a process that runs threads
        self._stop = context.Event()
        self._results = context.Queue()
        self._ready = context.Barrier(len(kinds) + 1)
        self._processes = [
            context.Process(
                target=attacker.run,
                args=(kind, self._stop, self._results, self._ready),
                daemon=True,
                name=f"attack-{kind}",
            )
            for kind in kinds
        ]
        self.counts: dict[str, Counter] = {}

    def start(self) -> "Attack":
        """Start every attacker; return once each has prepared (imports, its giant body) and attacks."""
        for process in self._processes:
            process.start()
        self._ready.wait(timeout=600)
        return self

    def stop(self) -> None:
        self._stop.set()
        for _ in self._processes:
            kind, counts = self._results.get(timeout=300)
            self.counts[kind] = counts
        for process in self._processes:
            process.join(timeout=120)

    def report(self) -> dict:
        return {name: dict(sorted(self.counts.get(name, Counter()).items(), key=str)) for name in self.kinds}


@dataclass
class Attacker:
    """One attacker process's settings and loops (picklable: spawned processes receive it)."""

    address: tuple[str, int]
    token: str
    components: list[str]
    giant_images: int
    slowloris: int
    size: int

    def run(self, kind: str, stop, results, ready) -> None:
        # on one machine the attackers' own CPU would be taken from the server, which on their
        # own machines it is not: they run at the lowest priority, the server's work for them counts
        os.nice(19)
        self._stop, self._ready, self.counts = stop, ready, {kind: Counter()}
        try:
            getattr(self, f"_{kind}")()
        finally:
            results.put((kind, self.counts[kind]))

    # -- each attacker ------------------------------------------------------------------------------
    def _connect(self, kind: str, timeout_s: float = 30.0) -> socket.socket:
        return socket.create_connection(self.address, timeout=timeout_s, source_address=(ATTACKER_ADDRESSES[kind], 0))

    def _exchange(self, kind: str, data: bytes, read: bool = True) -> None:
        """Send `data` on a new connection and count the status answered (or what went wrong)."""
        try:
            with self._connect(kind) as sock:
                sock.sendall(data)
                if not read:
                    return
                answer = sock.recv(64)
            self.counts[kind][answer[9:12].decode(errors="replace") or "closed"] += 1
        except OSError as exc:
            self.counts[kind][type(exc).__name__] += 1

    def _head(self, length: int | None, token: str | None = None, path: str = "/v1/score") -> bytes:
        lines = [f"POST {path} HTTP/1.1", "Host: x", f"Authorization: Bearer {token or self.token}"]
        if length is not None:
            lines.append(f"Content-Length: {length}")
        return ("\r\n".join(lines) + "\r\n\r\n").encode()

    def _giant(self) -> None:
        import torch

        from genalign.rewards.wire import ScoreRequest, encode_request

        images = torch.randint(0, 256, (self.giant_images, 3, self.size, self.size), dtype=torch.uint8)
        body = encode_request(
            ScoreRequest(images, ["giant"] * self.giant_images, [{}] * self.giant_images, self.components)
        )
        self._ready.wait(timeout=600)
        abandon = False
        while not self._stop.is_set():
            abandon = not abandon
            try:
                with self._connect("giant", timeout_s=600) as sock:
                    sock.sendall(self._head(len(body)) + body)
                    if abandon:  # gone a moment later: the server must drop the rest of its work
                        self._stop.wait(1.0)
                        self.counts["giant"]["abandoned"] += 1
                        continue
                    sock.settimeout(600)
                    answer = sock.recv(64)
                    self.counts["giant"][answer[9:12].decode(errors="replace") or "closed"] += 1
            except OSError as exc:
                self.counts["giant"][type(exc).__name__] += 1
                self._stop.wait(0.5)

    def _slowloris(self) -> None:
        self._ready.wait(timeout=600)
        sockets: list[socket.socket] = []
        while not self._stop.is_set():
            while len(sockets) < self.slowloris and not self._stop.is_set():
                try:
                    sock = self._connect("slowloris", timeout_s=5)
                    sock.sendall(b"POST /v1/score HTTP/1.1\r\nHost: x\r\n")
                    sock.setblocking(False)
                    sockets.append(sock)
                    self.counts["slowloris"]["opened"] += 1
                except OSError as exc:
                    self.counts["slowloris"][type(exc).__name__] += 1
                    break
            self._stop.wait(1.0)
            for sock in list(sockets):  # one more header line each; a closed one is counted and replaced
                try:
                    if sock.recv(1, socket.MSG_PEEK) == b"":
                        raise ConnectionResetError
                except BlockingIOError:
                    pass
                except OSError:
                    self.counts["slowloris"]["closed by the server"] += 1
                    sockets.remove(sock)
                    sock.close()
                    continue
                try:
                    sock.send(b"X-Slow: 1\r\n")
                except OSError:
                    self.counts["slowloris"]["closed by the server"] += 1
                    sockets.remove(sock)
                    sock.close()
        for sock in sockets:
            sock.close()

    def _malformed(self) -> None:
        deep = b"[" * 100_000 + b"]" * 100_000
        cases = [
            self._head(10**12) + b"x" * 65536,  # declared far past the limit
            self._head(100_000) + b"x" * 10,  # truncated: the connection closes mid-body
            self._head(11) + b"hello world",  # not safetensors
            self._head(len(deep) + 8) + len(deep).to_bytes(8, "little") + deep,
            self._head(None) + b"no length",
        ]
        self._ready.wait(timeout=600)
        while not self._stop.is_set():
            for index, data in enumerate(cases):
                self._exchange("malformed", data, read=index != 1)

    def _tokens(self) -> None:
        self._ready.wait(timeout=600)
        while not self._stop.is_set():
            guess = secrets.token_urlsafe(32)
            self._exchange(
                "tokens",
                f"GET /v1/info HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {guess}\r\n"
                f"Connection: close\r\n\r\n".encode(),
            )


def abuse_test(
    url: str,
    token: str,
    components: list[str],
    clients: int = 4,
    rate_per_s: float = 2.0,
    seconds: float = 20.0,
    batch: int = 4,
    size: int = 64,
    giant_images: int = 2000,
    slowloris: int = 2000,
    timeout_s: float = 120.0,
    kinds: tuple[str, ...] = tuple(ATTACKER_ADDRESSES),
) -> dict:
    """The valid traffic alone, then under attack -> both runs' figures, the p99 ratio and the
    attackers' counts."""
    clean = steady_traffic(url, components, clients, rate_per_s, seconds, batch, size, timeout_s)
    attack = Attack(url, token, components, giant_images, slowloris, size, kinds).start()
    time.sleep(2.0)  # the attack is under way (slowloris connections open, a giant request in) before the first call
    try:
        attacked = steady_traffic(url, components, clients, rate_per_s, seconds, batch, size, timeout_s)
    finally:
        attack.stop()
    ratio = attacked["p99_ms"] / clean["p99_ms"] if clean["p99_ms"] and attacked["p99_ms"] else None
    return {
        "clean": clean,
        "attacked": attacked,
        "p99_ratio": round(ratio, 2) if ratio else None,
        "attacks": attack.report(),
    }


# ---------------------------------------------------------------- the server
def start_server(components: list[str], overrides: list[str], flags: list[str]) -> tuple[subprocess.Popen, str]:
    """`genalign serve-reward` in its own process on a free loopback port -> (process, url)."""
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "genalign",
            "serve-reward",
            "--components",
            *components,
            "--port",
            "0",
            *flags,
            *overrides,
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    line = process.stdout.readline()  # {"serving": [...], "url": ...} once it listens
    if not line:
        process.kill()
        raise RuntimeError("serve-reward did not start")
    return process, json.loads(line)["url"]


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--rate", type=float, default=2.0, help="calls per second per valid client")
    parser.add_argument("--seconds", type=float, default=20.0, help="length of each run (clean, attacked)")
    parser.add_argument("--batch", type=int, default=4, help="images per call")
    parser.add_argument("--size", type=int, default=64, help="image height and width")
    parser.add_argument("--giant-images", type=int, default=2000, help="images per request of the giant attacker")
    parser.add_argument("--slowloris", type=int, default=2000, help="connections the slowloris attacker holds")
    parser.add_argument("--components", nargs="+", default=["jpeg_compressibility"])
    parser.add_argument("--server-batch", type=int, default=16, help="the started server's reward.batch_size")
    parser.add_argument("--url", default=None, help="an already running server (default: start one here)")
    parser.add_argument(
        "--attacks",
        nargs="+",
        default=list(ATTACKER_ADDRESSES),
        choices=list(ATTACKER_ADDRESSES),
        help="the attackers to run beside the valid clients",
    )
    parser.add_argument("--closed-loop", action="store_true", help="the plain throughput test instead")
    parser.add_argument("--requests", type=int, default=50, help="--closed-loop: calls per client")
    args = parser.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ.setdefault("GENALIGN_REWARD_TOKEN", secrets.token_urlsafe(32))
    server, url = (
        (None, args.url) if args.url else start_server(args.components, [f"reward.batch_size={args.server_batch}"], [])
    )
    try:
        if args.closed_loop:
            figures = load_test(url, args.components, args.clients, args.requests, args.batch, args.size)
            figures = {k: round(v, 3) if isinstance(v, float) else v for k, v in figures.items()}
        else:
            figures = abuse_test(
                url,
                os.environ["GENALIGN_REWARD_TOKEN"],
                args.components,
                args.clients,
                args.rate,
                args.seconds,
                args.batch,
                args.size,
                args.giant_images,
                args.slowloris,
                kinds=tuple(args.attacks),
            )
    finally:
        if server is not None:
            server.terminate()
            server.wait(timeout=120)
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
