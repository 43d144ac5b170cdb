"""`genalign serve-reward`: scorers behind an HTTP server, for trainers on other machines.

Where it fits: a large judge (a VLM, a big preference model) is loaded once on its own
machine and scores for any number of training jobs, which set `reward.runtime=http`
(`http_runtime.py`). Built on aiohttp, a maintained asyncio HTTP server and client that the
Ray dependency already installs (Ray's dashboard runs on it), so the service adds no new
framework and one library serves both ends.

How a request flows: the handler checks the shared-secret token (before reading the body),
reads at most `--max-request-mb`, decodes it (`wire.py`), validates it with the same checks as
in-process scoring, and puts it on a bounded queue (`--max-queue` requests; a full queue
answers 503 at once, which the client retries with back-off within its timeout). One batcher
task takes queued requests, merges consecutive ones that ask for the same components on media
of the same shape until `reward.batch_size` images, and scores the merged batch on one worker
thread with `LocalRewardRuntime` (so the scorers see one call at a time, exactly as
in-process, and every score check is the same). A scorer failure on a merged batch is retried
request by request, so one client's bad sample fails only that client's request.

Safety: binds 127.0.0.1 unless `--host` says otherwise; every route but /healthz needs
`Authorization: Bearer <token>` where the token is read from an environment variable (never a
flag, which `ps` would show); bodies are raw tensors in safetensors, never pickle. The token
is not encryption: across machines use an SSH tunnel or a TLS reverse proxy.
"""

from __future__ import annotations

import argparse
import asyncio
import hmac
import ipaddress
import json
import logging
import os
import signal
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
import torch

from genalign.config.errors import UserError
from genalign.rewards.base import RewardError, RewardFunction
from genalign.rewards.composite import LocalRewardRuntime
from genalign.rewards.config import RewardConfig
from genalign.rewards.scores import build_scorer, check_inputs
from genalign.rewards.wire import (HEALTH_PATH, INFO_PATH, SCORE_PATH, ScoreRequest, WireError, decode_request,
                                   encode_reply, require_aiohttp)

log = logging.getLogger(__name__)

DEFAULT_PORT = 8700


@dataclass
class ServeOptions:
    """The server's own settings (`genalign serve-reward --help`); scorers come from reward.*."""
    host: str = "127.0.0.1"
    """Address to bind; loopback by default. 0.0.0.0 serves every interface."""
    port: int = DEFAULT_PORT
    """TCP port (0: any free port, printed at start)."""
    token_env: str = "GENALIGN_REWARD_TOKEN"
    """Environment variable holding the shared-secret token clients must send."""
    max_queue: int = 64
    """Requests that may wait for scoring; one more is answered 503 (busy) at once."""
    max_request_mb: float = 256.0
    """Largest request body accepted (MiB); larger is answered 413 before it is read."""

    def problems(self) -> list[str]:
        out = []
        if not 0 <= self.port <= 65535:
            out.append(f"--port {self.port} is not a TCP port")
        if self.max_queue < 1:
            out.append(f"--max-queue {self.max_queue} must be >= 1")
        if self.max_request_mb <= 0:
            out.append(f"--max-request-mb {self.max_request_mb} must be > 0")
        return out

    @property
    def max_request_bytes(self) -> int:
        return int(self.max_request_mb * 2**20)


@dataclass
class _Pending:
    request: ScoreRequest
    future: asyncio.Future = field(repr=False)


class RewardService:
    """The aiohttp application: routes, token check, bounded queue, batcher, scoring thread."""

    def __init__(self, scorers: dict[str, RewardFunction], cfg: RewardConfig, token: str, options: ServeOptions):
        if not token:
            raise ValueError("RewardService needs a non-empty token")
        self.scorers = scorers
        self.cfg = cfg
        self.options = options
        self._token = token.encode()
        self._queue: asyncio.Queue[_Pending] | None = None
        self._batcher: asyncio.Task | None = None
        # one thread: the scorers see one call at a time, in order, as with the local runtime
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="genalign-serve",
                                            initializer=torch.set_num_threads, initargs=(torch.get_num_threads(),))

    def app(self):
        from aiohttp import web

        app = web.Application(client_max_size=self.options.max_request_bytes)
        app.router.add_get(HEALTH_PATH, self._health)
        app.router.add_get(INFO_PATH, self._info)
        app.router.add_post(SCORE_PATH, self._score)
        app.on_startup.append(self._start)
        app.on_cleanup.append(self._stop)
        return app

    async def _start(self, app) -> None:
        self._queue = asyncio.Queue(maxsize=self.options.max_queue)
        self._batcher = asyncio.create_task(self._batch_loop())

    async def _stop(self, app) -> None:
        if self._batcher is not None:
            self._batcher.cancel()
        self._executor.shutdown(wait=False, cancel_futures=True)

    def _authorized(self, request) -> bool:
        sent = request.headers.get("Authorization", "")
        return hmac.compare_digest(sent.encode(), b"Bearer " + self._token)

    @staticmethod
    def _error(status: int, message: str):
        from aiohttp import web

        return web.json_response({"error": message}, status=status)

    async def _health(self, request):
        from aiohttp import web

        return web.json_response({"ok": True})

    async def _info(self, request):
        from aiohttp import web

        if not self._authorized(request):
            return self._error(401, f"wrong or missing token (the server reads it from ${self.options.token_env})")
        from genalign import __version__

        return web.json_response({"components": list(self.scorers), "batch_size": self.cfg.batch_size,
                                  "max_request_bytes": self.options.max_request_bytes,
                                  "video_reduction": self.cfg.video_reduction, "genalign": __version__})

    async def _score(self, request):
        from aiohttp import web

        if not self._authorized(request):
            return self._error(401, f"wrong or missing token (the server reads it from ${self.options.token_env})")
        try:
            body = await request.read()  # aiohttp answers 413 past client_max_size
        except web.HTTPRequestEntityTooLarge:
            return self._error(413, f"request body exceeds the server's --max-request-mb "
                                    f"{self.options.max_request_mb:g}; lower reward.batch_size")
        try:
            scoring = decode_request(body)
            unknown = [name for name in scoring.components if name not in self.scorers]
            if unknown:
                raise WireError(f"this server does not serve reward(s) {unknown}; it serves {list(self.scorers)}")
            scoring.metadata = check_inputs(scoring.images, scoring.prompts, scoring.metadata)
        except (WireError, ValueError) as exc:
            return self._error(400, str(exc))
        pending = _Pending(scoring, asyncio.get_running_loop().create_future())
        try:
            self._queue.put_nowait(pending)
        except asyncio.QueueFull:
            return self._error(503, f"busy: {self.options.max_queue} requests already wait (--max-queue)")
        outcome = await pending.future
        if isinstance(outcome, str):
            return self._error(422, outcome)
        return web.json_response(encode_reply(outcome))

    async def _batch_loop(self) -> None:
        loop = asyncio.get_running_loop()
        carried: _Pending | None = None
        while True:
            group = [carried if carried is not None else await self._queue.get()]
            carried = None
            count = len(group[0].request.prompts)
            while count < self.cfg.batch_size and not self._queue.empty():
                item = self._queue.get_nowait()
                fits = count + len(item.request.prompts) <= self.cfg.batch_size
                if fits and _mergeable(group[0].request, item.request):
                    group.append(item)
                    count += len(item.request.prompts)
                else:
                    carried = item
                    break
            try:
                outcomes = await loop.run_in_executor(self._executor, self._score_group, [p.request for p in group])
            except Exception as exc:  # noqa: BLE001 - a bug here must answer the clients, not kill the loop
                log.exception("reward server: scoring a batch failed")
                outcomes = [f"reward server error: {type(exc).__name__}: {exc}"] * len(group)
            for pending, outcome in zip(group, outcomes):
                if not pending.future.done():
                    pending.future.set_result(outcome)

    def _score_group(self, group: list[ScoreRequest]) -> list[dict[str, torch.Tensor] | str]:
        """Merged requests -> per request {name: scores [n]} or the error message for it."""
        if len(group) > 1:
            try:
                merged = self._score_one(ScoreRequest(torch.cat([r.images for r in group]),
                                                      [p for r in group for p in r.prompts],
                                                      [m for r in group for m in r.metadata], group[0].components))
            except (RewardError, ValueError):
                return [self._score_or_message(r) for r in group]  # only the faulty request fails
            offsets = [0]
            for r in group:
                offsets.append(offsets[-1] + len(r.prompts))
            return [{name: values[a:b] for name, values in merged.items()} for a, b in zip(offsets, offsets[1:])]
        return [self._score_or_message(group[0])]

    def _score_or_message(self, request: ScoreRequest) -> dict[str, torch.Tensor] | str:
        try:
            return self._score_one(request)
        except (RewardError, ValueError) as exc:
            return str(exc)

    def _score_one(self, request: ScoreRequest) -> dict[str, torch.Tensor]:
        scorers = {name: self.scorers[name] for name in request.components}
        runtime = LocalRewardRuntime(scorers, dict.fromkeys(scorers, 1.0), self.cfg.batch_size,
                                     video_reduction=self.cfg.video_reduction)
        with torch.no_grad():
            return runtime.score(request.images, request.prompts, request.metadata).components


def _mergeable(a: ScoreRequest, b: ScoreRequest) -> bool:
    return a.components == b.components and a.images.shape[1:] == b.images.shape[1:]


def read_token(token_env: str) -> str:
    token = os.environ.get(token_env, "")
    if not token:
        raise UserError(f"${token_env} is not set: the reward service needs a shared-secret token in the "
                        f"environment of the server and of every trainer, e.g. export {token_env}=$(python -c "
                        f"'import secrets; print(secrets.token_urlsafe(32))')")
    return token


async def start_site(app, host: str, port: int):
    """Start the aiohttp `app` listening on host:port -> (runner, "http://host:port" as bound)."""
    from aiohttp import web

    runner = web.AppRunner(app, handle_signals=False, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    bound_host, bound_port = runner.addresses[0][:2]
    host_text = f"[{bound_host}]" if ":" in bound_host else bound_host
    return runner, f"http://{host_text}:{bound_port}"


class BackgroundServer:
    """An aiohttp app (`RewardService.app()`) on its own event loop in a daemon thread (tests,
    benchmarks, notebooks)."""

    def __init__(self, app, host: str = "127.0.0.1", port: int = 0):
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="genalign-reward-server", daemon=True)
        self.thread.start()
        self.runner, self.url = asyncio.run_coroutine_threadsafe(start_site(app, host, port),
                                                                 self.loop).result(timeout=60)

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self.runner.cleanup(), self.loop).result(timeout=60)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=60)


def build_service(components: list[str], overrides: list[str], options: ServeOptions,
                  device: str = "cpu") -> RewardService:
    """Validate everything (options, reward.* overrides, token), then build the scorers."""
    require_aiohttp()
    cfg = serve_config(components, overrides)
    problems = options.problems()
    if problems:
        from genalign.config.errors import ConfigError

        raise ConfigError(problems)
    token = read_token(options.token_env)
    scorers = {name: build_scorer(name, device, dict(cfg.kwargs.get(name, {})), cfg.allow_import)
               for name in components}
    return RewardService(scorers, cfg, token, options)


def serve_config(components: list[str], overrides: list[str]) -> RewardConfig:
    """reward.* for the served components: `reward.kwargs.<name>.<key>=...`, `reward.batch_size=...`,
    `reward.video_reduction=...`, `reward.allow_import=[...]`, checked as a training config is."""
    from genalign.config.errors import ConfigError
    from genalign.config.loader import config_from_dict
    from genalign.rewards.composite import active_components
    from genalign.rewards.options import reward_option_problems

    outside = [item for item in overrides if not item.lstrip("+").startswith("reward.")]
    if outside:
        raise ConfigError([f"serve-reward override {item!r}: only reward.* keys configure a reward server"
                           for item in outside])
    if not components:
        raise ConfigError(["serve-reward: --components names no reward"])
    cfg = config_from_dict({"reward": {"components": dict.fromkeys(components, 1.0)}},
                           "serve-reward --components", [item.lstrip("+") for item in overrides])
    cfg.reward.components = dict.fromkeys(components, 1.0)  # served as named; weights are the trainer's
    try:
        active_components(cfg.reward, None)
    except ValueError as exc:
        raise ConfigError([str(exc)]) from exc
    problems = reward_option_problems(cfg)
    if problems:
        raise ConfigError(problems)
    return cfg.reward


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def main(argv: list[str] | None = None) -> int:
    defaults = ServeOptions()
    parser = argparse.ArgumentParser(
        prog="genalign serve-reward", formatter_class=argparse.ArgumentDefaultsHelpFormatter,
        description="Serve reward scorers over HTTP for trainers that set reward.runtime=http "
                    "(reward.url=http://HOST:PORT; the token in the same environment variable).")
    parser.add_argument("--components", nargs="+", required=True, metavar="NAME",
                        help="scorers to serve (registry names, or dotted paths listed in reward.allow_import)")
    parser.add_argument("--host", default=defaults.host, help="address to bind (loopback unless you widen it)")
    parser.add_argument("--port", type=int, default=defaults.port, help="TCP port (0: any free port)")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu",
                        help="device the scorers load on")
    parser.add_argument("--token-env", default=defaults.token_env,
                        help="environment variable holding the shared-secret token")
    parser.add_argument("--max-queue", type=int, default=defaults.max_queue,
                        help="requests that may wait; one more is answered 503 (busy)")
    parser.add_argument("--max-request-mb", type=float, default=defaults.max_request_mb,
                        help="largest request body accepted (MiB)")
    parser.add_argument("overrides", nargs="*",
                        help="reward.* overrides: reward.kwargs.<name>.<key>=value, reward.batch_size=N, ...")
    args = parser.parse_args(argv)
    # `--components a b key=value`: argparse gives the overrides to --components; a name never has "="
    args.overrides = [item for item in args.components if "=" in item] + args.overrides
    args.components = [item for item in args.components if "=" not in item]
    options = ServeOptions(args.host, args.port, args.token_env, args.max_queue, args.max_request_mb)
    service = build_service(args.components, args.overrides, options, args.device)
    if not _is_loopback(options.host):
        log.warning("serving on %s: the token authenticates but does not encrypt; across untrusted networks "
                    "put the server behind an SSH tunnel or a TLS reverse proxy", options.host)
    asyncio.run(_serve_until_signalled(service, options))
    return 0


async def _serve_until_signalled(service: RewardService, options: ServeOptions) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    runner, url = await start_site(service.app(), options.host, options.port)
    # printed, not only logged: a supervisor (or a test) reads the bound port from this line
    print(json.dumps({"serving": list(service.scorers), "url": url}), flush=True)
    try:
        await stop.wait()
    finally:
        await runner.cleanup()
