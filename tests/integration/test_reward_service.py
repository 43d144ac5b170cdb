"""The reward service as a user runs it: `genalign serve-reward` in its own process, killed and
restarted mid-step, and a training run scored over HTTP that is the same run as one scored
in-process."""

from __future__ import annotations

import csv
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from genalign.cli import main as cli_main
from genalign.preflight.load import load_config
from genalign.rewards.base import RewardError
from genalign.rewards.composite import build_reward_runtime
from genalign.rewards.config import RewardConfig
from genalign.rewards.serve_command import build_service
from genalign.rewards.server import BackgroundServer, ServeOptions
from genalign.training.trainer import Trainer

TOKEN = "integration-token"
FAKES_DIR = Path(__file__).parents[1] / "unit" / "rewards"
BENCHMARKS_DIR = Path(__file__).parents[2] / "benchmarks"
PIXEL = "reward_fakes:MeanPixelReward"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_server(port: int, delay_s: float) -> subprocess.Popen:
    """`genalign serve-reward` serving a 'delay_s per call' pixel scorer; returns once it listens."""
    env = {
        **os.environ,
        "GENALIGN_REWARD_TOKEN": TOKEN,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(FAKES_DIR), os.environ.get("PYTHONPATH")])),
    }
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "genalign",
            "serve-reward",
            "--components",
            PIXEL,
            "--port",
            str(port),
            f"reward.allow_import=[{PIXEL}]",
            f'reward.kwargs={{"{PIXEL}": {{delay_s: {delay_s}}}}}',
            "reward.batch_size=2",
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(process.stdout), daemon=True)
    reader.start()
    deadline = time.monotonic() + 180  # importing torch on a loaded 2-core box
    while not any('"url"' in line for line in lines):
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            raise AssertionError(f"serve-reward did not start: {process.stderr.read()}")
        time.sleep(0.1)
    assert json.loads(next(line for line in lines if '"url"' in line))["url"] == f"http://127.0.0.1:{port}"
    return process


def test_server_killed_mid_step_recovers_after_restart_and_fails_clearly_when_gone(monkeypatch, images, caplog):
    monkeypatch.setenv("GENALIGN_REWARD_TOKEN", TOKEN)
    monkeypatch.syspath_prepend(str(FAKES_DIR))
    port = free_port()
    expected = images.float().mean(dim=(1, 2, 3)) / 255.0
    server = start_server(port, delay_s=1.0)
    cfg = RewardConfig(
        components={PIXEL: 1.0},
        allow_import=[PIXEL],
        runtime="http",
        url=f"http://127.0.0.1:{port}",
        batch_size=2,
        timeout_s=60.0,
        startup_timeout_s=180.0,
    )
    runtime = build_reward_runtime(cfg, "cpu")
    try:
        future = runtime.score_async(images, [f"p{i}" for i in range(6)], [])  # 3 requests, >= 3 s of scoring
        time.sleep(0.5)
        server.send_signal(signal.SIGKILL)  # mid-step: requests in flight and queued
        server.wait(timeout=30)
        server = start_server(port, delay_s=0.0)  # the supervisor restarts it
        scores = future.result()  # every request retried once the server answers again
        assert torch.equal(scores.components[PIXEL], expected)
        assert "connection dropped while scoring" in caplog.text  # recovered by the retry, not by luck

        server.send_signal(signal.SIGKILL)
        server.wait(timeout=30)
        runtime.cfg.startup_timeout_s = 2.0  # gone for good: a bounded wait, then the error
        start = time.monotonic()
        with pytest.raises(
            RewardError,
            match=rf"'{PIXEL}' on reward server http://127.0.0.1:{port}: cannot "
            rf"reconnect to the server within reward.startup_timeout_s=2.0",
        ):
            runtime.score(images, [f"p{i}" for i in range(6)], [])
        assert time.monotonic() - start < 60
    finally:
        runtime.close()
        if server.poll() is None:
            server.kill()
            server.wait(timeout=30)


def test_sigterm_while_a_giant_request_is_scored_answers_it_and_exits(monkeypatch, images):
    """A request of 400 images behind a 1 s-per-call scorer (200 calls of the server's 2): SIGTERM
    ends the server after the call being scored, answering the waiting client 503, not after
    every call."""
    from genalign.rewards.wire import ScoreRequest, encode_request

    port = free_port()
    server = start_server(port, delay_s=1.0)
    giant = torch.zeros(400, 3, 8, 8, dtype=torch.uint8)
    body = encode_request(ScoreRequest(giant, ["p"] * 400, [{}] * 400, [PIXEL]))
    answers: list = []

    def send() -> None:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
        try:
            connection.request("POST", "/v1/score", body=body, headers={"Authorization": f"Bearer {TOKEN}"})
            response = connection.getresponse()
            answers.append((response.status, json.loads(response.read())))
        except OSError as exc:  # the server went away before answering: also not 200 s of scoring
            answers.append((None, str(exc)))

    sender = threading.Thread(target=send)
    try:
        sender.start()
        time.sleep(3.0)  # the body is read and the first calls are being scored
        server.send_signal(signal.SIGTERM)
        assert server.wait(timeout=120) == 0  # far less than the 200 s the request would need
        sender.join(timeout=120)
        assert answers and answers[0][0] in (503, None), answers
        if answers[0][0] == 503:
            assert "shutting down" in answers[0][1]["error"]
    finally:
        if server.poll() is None:
            server.kill()
            server.wait(timeout=30)


def test_a_run_whose_reward_server_is_gone_ends_with_one_line(tmp_path, monkeypatch, capsys, caplog):
    """`genalign train` with reward.runtime=http and nothing at reward.url: one error line (exit
    2) saying which server and how to resume, no traceback, no unclosed aiohttp session."""
    import gc

    monkeypatch.setenv("GENALIGN_REWARD_TOKEN", TOKEN)
    monkeypatch.setattr("genalign.cli._configure_logging", lambda: None)
    port = free_port()  # nothing listens there
    code = cli_main(
        [
            "train",
            f"trainer.output_dir={tmp_path / 'run'}",
            "reward.runtime=http",
            f"reward.url=http://127.0.0.1:{port}",
            "reward.startup_timeout_s=1",
            "trainer.progress_bar=false",
        ]
    )
    gc.collect()  # an unclosed aiohttp session complains when it is collected
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and "Traceback" not in err, err
    assert lines[0].startswith(
        f"genalign: error: reward(s) 'toy_shape' on reward server http://127.0.0.1:{port}: "
        "cannot reach the server within reward.startup_timeout_s=1.0"
    )
    assert lines[1].startswith("hint: once the reward server answers again, rerun the same command")
    assert "Unclosed" not in caplog.text


def test_valid_clients_are_served_while_attackers_abuse_the_server(tmp_path, monkeypatch):
    """The load-and-abuse benchmark, small: valid trainers at a steady rate while attackers (each
    its own process and loopback address) send giant batches, slowloris connections, oversized
    and malformed bodies and wrong tokens. No valid request may fail; the attackers must have
    met the limits. Latency is the benchmark's to print, not a test's to assert."""
    monkeypatch.syspath_prepend(str(BENCHMARKS_DIR))  # the attackers' spawned processes import it too
    import bench_reward_service as bench

    token = "abuse-test-" + "k" * 32
    env = {**os.environ, "GENALIGN_REWARD_TOKEN": token}
    log_file = open(tmp_path / "server.log", "w")
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "genalign",
            "serve-reward",
            "--components",
            "jpeg_compressibility",
            "--port",
            "0",
            "--max-connections",
            "64",
            "--header-timeout-s",
            "2",
            "--max-request-mb",
            "4",
            "reward.batch_size=8",
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=log_file,
        text=True,
    )
    try:
        line = server.stdout.readline()  # {"serving": ..., "url": ...} once it listens
        assert line, (tmp_path / "server.log").read_text()
        url = json.loads(line)["url"]
        monkeypatch.setenv("GENALIGN_REWARD_TOKEN", token)
        figures = bench.abuse_test(
            url,
            token,
            ["jpeg_compressibility"],
            clients=2,
            rate_per_s=2.0,
            seconds=4.0,
            batch=2,
            size=32,
            giant_images=300,
            slowloris=100,
            timeout_s=300.0,
        )
    finally:
        server.terminate()
        server.wait(timeout=120)
        log_file.close()
    for run in ("clean", "attacked"):
        assert figures[run]["failed"] == 0 and figures[run]["answered"] == figures[run]["requests"], figures
    attacks = figures["attacks"]
    assert attacks["tokens"].get("401", 0) >= 1 and attacks["tokens"].get("429", 0) >= 1, attacks
    assert attacks["malformed"].get("400", 0) >= 1 and attacks["malformed"].get("413", 0) >= 1, attacks
    assert attacks["slowloris"].get("closed by the server", 0) >= 1, attacks
    assert "Traceback" not in (tmp_path / "server.log").read_text()


@pytest.fixture
def images():
    return (torch.arange(6, dtype=torch.uint8) * 40).view(6, 1, 1, 1).expand(6, 3, 16, 16).contiguous()


def test_serve_reward_refuses_bad_setups_before_loading(monkeypatch, capsys):
    monkeypatch.delenv("GENALIGN_REWARD_TOKEN", raising=False)
    assert cli_main(["serve-reward", "--components", "jpeg_compressibility"]) == 2
    assert "$GENALIGN_REWARD_TOKEN is not set" in capsys.readouterr().err
    monkeypatch.setenv("GENALIGN_REWARD_TOKEN", TOKEN)
    assert cli_main(["serve-reward", "--components", "pickscor"]) == 2
    assert "pickscor" in capsys.readouterr().err
    assert cli_main(["serve-reward", "--components", "pickscore", "reward.kwargs.pickscore.model_nam=x"]) == 2
    assert "reward.kwargs.pickscore.model_nam" in capsys.readouterr().err
    assert cli_main(["serve-reward", "--components", "ocr", "trainer.num_steps=3"]) == 2
    assert "only reward.* keys" in capsys.readouterr().err
    assert cli_main(["serve-reward", "--components", "ocr", "--max-queue", "0"]) == 2
    assert "--max-queue 0 must be >= 1" in capsys.readouterr().err


def run_toy(out: Path, *extra: str):
    """2 steps of the default toy recipe, shrunk, with its evaluation (gold and quality rewards)."""
    overrides = [
        "rollout.num_steps=4",
        "rollout.n=2",
        "rollout.rollout_batch_size=4",
        "rollout.sample_batch_size=4",
        "reward.batch_size=4",
        "eval.every=2",
        "eval.at_start=false",
        "eval.num_steps=2",
        "eval.max_prompts=2",
        "eval.samples_per_prompt=2",
        "trainer.num_steps=2",
        "trainer.save_every=0",
        "trainer.progress_bar=false",
        f"trainer.output_dir={out}",
        *extra,
    ]
    cfg = load_config("experiment/toy/shapes_grpo", overrides)
    Trainer(cfg).train()
    rows = list(csv.DictReader(open(out / "metrics.csv")))
    evals = list(csv.DictReader(open(out / "eval_metrics.csv")))
    return cfg, rows, evals, load_file(str(out / "checkpoint-final" / "trainable.safetensors"))


def test_a_run_scored_over_http_is_the_run_scored_in_process(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("GENALIGN_REWARD_TOKEN", TOKEN)
    cfg, local_rows, local_evals, local_weights = run_toy(tmp_path / "local")
    served = [*cfg.reward.components, *cfg.eval.gold_rewards, *cfg.eval.quality_metrics]
    server = BackgroundServer(build_service(served, [], ServeOptions(port=0)).app())
    from genalign.rewards.http_runtime import HttpRewardRuntime

    calls, built = [], []
    score_async, init = HttpRewardRuntime.score_async, HttpRewardRuntime.__init__
    monkeypatch.setattr(HttpRewardRuntime, "score_async", lambda self, *a: calls.append(1) or score_async(self, *a))
    monkeypatch.setattr(HttpRewardRuntime, "__init__", lambda self, *a: built.append(self) or init(self, *a))
    try:
        _, http_rows, http_evals, http_weights = run_toy(
            tmp_path / "http", "reward.runtime=http", f"reward.url={server.url}", "reward.async_scoring=true"
        )
    finally:
        server.stop()
    import gc

    gc.collect()  # an aiohttp session left open (the gold or quality runtime's) complains when collected
    assert "Unclosed" not in caplog.text
    assert len(built) == 3 and not any(runtime._finalizer.alive for runtime in built)  # closed by the trainer

    def untimed(row):
        return {k: v for k, v in row.items() if not k.startswith("time_") and not k.endswith("_per_s")}

    assert calls  # scored through the server
    assert len(local_rows) == len(http_rows) == 2 and len(local_evals) == len(http_evals) >= 1
    assert [untimed(r) for r in local_rows] == [untimed(r) for r in http_rows]  # every logged digit
    assert [untimed(r) for r in local_evals] == [untimed(r) for r in http_evals]
    assert all(torch.equal(local_weights[k], http_weights[k]) for k in local_weights)
