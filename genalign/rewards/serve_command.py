"""`genalign serve-reward`: check the setup, bind, load the scorers, serve until a signal.

Where it fits: `cli.py` hands the command's arguments here; the service itself (routes,
limits, scheduling) is `server.py`. The order is the point: everything that needs no scorer
(the options, the reward.* overrides, the token and its strength, the descriptor limit, the
listening address) is checked first, each mistake one `genalign: error:` line, so a taken port
or a typo never costs the minutes a large judge takes to load.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import signal
import socket

import torch

from genalign.config.errors import ConfigError, UserError
from genalign.config.loader import config_from_dict
from genalign.config.registry import import_problem, is_dotted_path
from genalign.rewards.base import RewardFunction
from genalign.rewards.composite import weights_to_build
from genalign.rewards.config import RewardConfig
from genalign.rewards.options import reward_option_problems
from genalign.rewards.scores import build_scorer
from genalign.rewards.server import RewardService, ServeOptions, bind_socket, start_site
from genalign.rewards.server_connections import descriptor_problem
from genalign.rewards.server_limits import token_problems
from genalign.rewards.wire import require_aiohttp

log = logging.getLogger(__name__)


def read_token(token_env: str) -> str:
    token = os.environ.get(token_env, "")
    if not token:
        raise UserError(
            f"${token_env} is not set: the reward service needs a shared-secret token in the "
            f"environment of the server and of every trainer, e.g. export {token_env}=$(python -c "
            f"'import secrets; print(secrets.token_urlsafe(32))')"
        )
    return token


def check_setup(components: list[str], overrides: list[str], options: ServeOptions) -> tuple[RewardConfig, str]:
    """Everything that needs no scorer: the options, the reward.* config, the token -> (cfg, token)."""
    require_aiohttp()
    cfg = serve_config(components, overrides)
    problems = options.problems()
    if problems:
        raise ConfigError(problems)
    token = read_token(options.token_env)
    problems = token_problems(token, options.token_env, options.public, options.insecure_token)
    descriptors = descriptor_problem(options.max_connections)  # raises the soft limit when it can
    if descriptors:
        problems.append(descriptors)
    if problems:
        raise ConfigError(problems)
    return cfg, token


def build_service(
    components: list[str], overrides: list[str], options: ServeOptions, device: str = "cpu"
) -> RewardService:
    """Validate everything (options, reward.* overrides, token), then build the scorers."""
    cfg, token = check_setup(components, overrides, options)
    return RewardService(build_scorers(cfg, components, device), cfg, token, options)


def build_scorers(cfg: RewardConfig, components: list[str], device: str) -> dict[str, RewardFunction]:
    return {name: build_scorer(name, device, dict(cfg.kwargs.get(name, {})), cfg.allow_import) for name in components}


def serve_config(components: list[str], overrides: list[str]) -> RewardConfig:
    """reward.* for the served components: `reward.kwargs.<name>.<key>=...`, `reward.batch_size=...`,
    `reward.video_reduction=...`, `reward.allow_import=[...]`, checked as a training config is
    (a dotted component must also import: its module's code runs before any scorer is built)."""
    outside = [item for item in overrides if not item.lstrip("+").startswith("reward.")]
    if outside:
        raise ConfigError(
            [f"serve-reward override {item!r}: only reward.* keys configure a reward server" for item in outside]
        )
    if not components:
        raise ConfigError(["serve-reward: --components names no reward"])
    cfg = config_from_dict(
        {"reward": {"components": dict.fromkeys(components, 1.0)}},
        "serve-reward --components",
        [item.lstrip("+") for item in overrides],
    )
    cfg.reward.components = dict.fromkeys(components, 1.0)  # served as named; weights are the trainer's
    try:
        weights_to_build(cfg.reward, None)
    except ValueError as exc:
        raise ConfigError([str(exc)]) from exc
    problems = reward_option_problems(cfg)
    problems += [
        problem
        for name in components
        if is_dotted_path(name)
        for problem in [import_problem("--components", name)]
        if problem
    ]
    if problems:
        raise ConfigError(problems)
    return cfg.reward


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    # `--components a b key=value`: argparse gives the overrides to --components; a name never has "="
    args.overrides = [item for item in args.components if "=" in item] + args.overrides
    args.components = [item for item in args.components if "=" not in item]
    options = ServeOptions(
        args.host,
        args.port,
        args.token_env,
        args.max_queue,
        args.max_request_mb,
        args.max_inflight_mb,
        args.max_connections,
        args.max_connections_per_address,
        args.header_timeout_s,
        args.body_timeout_s,
        args.insecure_token,
    )
    cfg, token = check_setup(args.components, args.overrides, options)
    sock = bind_socket(options.host, options.port)  # a taken port fails before minutes of model loading
    try:
        service = RewardService(build_scorers(cfg, args.components, args.device), cfg, token, options)
        if options.public:
            log.warning(
                "serving on %s: the token authenticates but does not encrypt; across untrusted networks "
                "put the server behind an SSH tunnel or a TLS reverse proxy",
                options.host,
            )
        asyncio.run(_serve_until_signalled(service, sock))
    finally:
        sock.close()
    return 0


def _parser() -> argparse.ArgumentParser:
    defaults = ServeOptions()
    parser = argparse.ArgumentParser(
        prog="genalign serve-reward",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
        description="Serve reward scorers over HTTP for trainers that set reward.runtime=http "
        "(reward.url=http://HOST:PORT; the token in the same environment variable).",
    )
    parser.add_argument(
        "--components",
        nargs="+",
        required=True,
        metavar="NAME",
        help="scorers to serve (registry names, or dotted paths listed in reward.allow_import)",
    )
    parser.add_argument("--host", default=defaults.host, help="address to bind (loopback unless you widen it)")
    parser.add_argument("--port", type=int, default=defaults.port, help="TCP port (0: any free port)")
    parser.add_argument(
        "--device", default="cuda" if torch.cuda.is_available() else "cpu", help="device the scorers load on"
    )
    parser.add_argument(
        "--token-env", default=defaults.token_env, help="environment variable holding the shared-secret token"
    )
    parser.add_argument(
        "--insecure-token",
        action="store_true",
        help="serve a non-loopback --host with a token under 32 characters or 8 distinct ones",
    )
    parser.add_argument(
        "--max-queue",
        type=int,
        default=defaults.max_queue,
        help="requests that may wait (one client address at most half); one more is answered 503",
    )
    parser.add_argument(
        "--max-request-mb",
        type=float,
        default=defaults.max_request_mb,
        help="largest request body accepted (MiB); larger is 413 before reading",
    )
    parser.add_argument(
        "--max-inflight-mb",
        type=float,
        default=defaults.max_inflight_mb,
        help="request bodies being read, waiting or scored at once (MiB); past it 503",
    )
    parser.add_argument(
        "--max-connections",
        type=int,
        default=defaults.max_connections,
        help="open connections; past it the oldest idle one is closed",
    )
    parser.add_argument(
        "--max-connections-per-address",
        type=int,
        default=None,
        help="open connections one client address may hold (default: a quarter of --max-connections; "
        "behind a reverse proxy set it to --max-connections)",
    )
    parser.add_argument(
        "--header-timeout-s",
        type=float,
        default=defaults.header_timeout_s,
        help="seconds a connection may take to send a request's headers (and may idle between requests)",
    )
    parser.add_argument(
        "--body-timeout-s",
        type=float,
        default=defaults.body_timeout_s,
        help="seconds a request's body may take to arrive (408 after)",
    )
    parser.add_argument(
        "overrides", nargs="*", help="reward.* overrides: reward.kwargs.<name>.<key>=value, reward.batch_size=N, ..."
    )
    return parser


async def _serve_until_signalled(service: RewardService, sock: socket.socket) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    runner, url = await start_site(service.app(), sock)
    # printed, not only logged: a supervisor (or a test) reads the bound port from this line
    print(json.dumps({"serving": list(service.scorers), "url": url}), flush=True)
    try:
        await stop.wait()
    finally:
        await runner.cleanup()
