"""reward.runtime=http against a reward server on loopback in this process: the same scores as
in-process scoring, server-side batching, back-pressure, and every failure a clear RewardError."""

from __future__ import annotations

import asyncio
import time

import pytest
import torch

from genalign.rewards.base import RewardError
from genalign.rewards.composite import build_reward_runtime
from genalign.rewards.config import RewardConfig
from genalign.rewards.scores import build_scorer
from genalign.rewards.server import BackgroundServer, RewardService, ServeOptions
from genalign.rewards.wire import ScoreRequest, decode_request, encode_request

TOKEN = "test-token"
PIXEL = "reward_fakes:MeanPixelReward"
PROMPT_LENGTH = "reward_fakes:PromptLengthReward"
PROBE = "reward_fakes:CallSizeProbe"
FAKES = [
    PIXEL,
    PROMPT_LENGTH,
    PROBE,
    "reward_fakes:RaisingReward",
    "reward_fakes:NanReward",
    "reward_fakes:MetadataReward",
]


@pytest.fixture
def token(monkeypatch):
    monkeypatch.setenv("GENALIGN_REWARD_TOKEN", TOKEN)
    return TOKEN


@pytest.fixture
def serve(start_reward_server, token):
    """serve(components, batch_size=..., kwargs=..., **ServeOptions fields) -> a running server."""

    def start(components, batch_size=4, kwargs=None, **options):
        return start_reward_server(
            {name: (kwargs or {}).get(name, {}) for name in components}, TOKEN, batch_size, **options
        )

    return start


def client(url, components, **fields):
    cfg = RewardConfig(
        components=components,
        allow_import=FAKES,
        runtime="http",
        url=url,
        **{"batch_size": 2, "timeout_s": 30.0, "startup_timeout_s": 10.0, **fields},
    )
    return build_reward_runtime(cfg, "cpu")


def test_wire_round_trip_keeps_every_byte():
    images = torch.randint(0, 256, (3, 2, 3, 5, 7), dtype=torch.uint8)  # video
    request = ScoreRequest(images, ["a", "b", "ç"], [{"k": [1, 2]}, {}, {"tag": "x"}], ["ocr"])
    back = decode_request(encode_request(request))
    assert torch.equal(back.images, images) and back.prompts == request.prompts
    assert back.metadata == request.metadata and back.components == ["ocr"]


def test_same_scores_as_in_process_and_async_returns_at_once(serve, images):
    components = {PIXEL: 2.0, PROMPT_LENGTH: 1.0, "jpeg_incompressibility": 1.0}
    prompts = [f"prompt {i}" * (i + 1) for i in range(6)]
    local = build_reward_runtime(RewardConfig(components=components, allow_import=FAKES, batch_size=2), "cpu")
    expected = local.score(images, prompts, [])
    server = serve(list(components), kwargs={PIXEL: {"delay_s": 1.0}})
    runtime = client(server.url, components)
    try:
        future = runtime.score_async(images, prompts, [])
        assert not future.done()  # 3 chunks behind a 1 s scorer: submitted, not waited on
        scores = future.result()
        assert scores.weights == expected.weights
        for name in components:
            assert torch.equal(scores.components[name], expected.components[name])
        assert torch.equal(scores.total, expected.total)
    finally:
        runtime.close()


def test_metadata_reaches_the_server_scorer(serve, images):
    server = serve(["reward_fakes:MetadataReward"])
    runtime = client(server.url, {"reward_fakes:MetadataReward": 1.0})
    try:
        scores = runtime.score(images, ["p"] * 6, [{"value": i / 4} for i in range(6)])
        assert scores.components["reward_fakes:MetadataReward"].tolist() == [i / 4 for i in range(6)]
    finally:
        runtime.close()


def test_server_merges_queued_requests_up_to_its_batch_size(serve, images):
    import reward_fakes

    reward_fakes.CALL_SIZES.clear()
    # one-sample requests; the first keeps the scorer busy 2 s while the other five queue
    server = serve([PROBE], batch_size=4, kwargs={PROBE: {"delay_s": 2.0}})
    runtime = client(server.url, {PROBE: 1.0}, batch_size=1)
    try:
        scores = runtime.score(images, ["p"] * 6, [])
    finally:
        runtime.close()
    assert torch.equal(scores.components[PROBE], images.float().mean(dim=(1, 2, 3)) / 255.0)
    # merged (queued one-sample requests scored together), never past the server's batch size; how
    # many had arrived while the first call slept depends on the machine's load, so not exactly 4
    assert sum(reward_fakes.CALL_SIZES) == 6 and 1 < max(reward_fakes.CALL_SIZES) <= 4


def test_full_queue_is_back_pressure_not_an_error(serve, images):
    server = serve([PIXEL], batch_size=1, kwargs={PIXEL: {"delay_s": 0.2}}, max_queue=1)
    runtime = client(server.url, {PIXEL: 1.0}, batch_size=1)
    try:  # six concurrent requests into a queue of one: 503s, retried with back-off, all scored
        scores = runtime.score(images, ["p"] * 6, [])
        assert torch.equal(scores.components[PIXEL], images.float().mean(dim=(1, 2, 3)) / 255.0)
    finally:
        runtime.close()


def test_wrong_or_missing_token_is_a_clear_error(serve, monkeypatch):
    server = serve([PIXEL])
    monkeypatch.setenv("GENALIGN_REWARD_TOKEN", "not-the-token")
    with pytest.raises(RewardError, match=r"HTTP 401.*GENALIGN_REWARD_TOKEN does not match") as err:
        client(server.url, {PIXEL: 1.0})
    assert server.url in str(err.value)
    monkeypatch.delenv("GENALIGN_REWARD_TOKEN")
    with pytest.raises(RewardError, match=r"\$GENALIGN_REWARD_TOKEN is not set"):
        client(server.url, {PIXEL: 1.0})


def test_a_reward_the_server_does_not_serve_is_named_at_start(serve):
    server = serve([PIXEL])
    with pytest.raises(RewardError, match=rf"{server.url} does not serve reward\(s\) \['{PROMPT_LENGTH}'\]"):
        client(server.url, {PIXEL: 1.0, PROMPT_LENGTH: 1.0})


def test_no_server_is_a_bounded_error(token):
    start = time.monotonic()
    with pytest.raises(RewardError, match=r"cannot reach the server within reward.startup_timeout_s=1.0"):
        client("http://127.0.0.1:9", {PIXEL: 1.0}, startup_timeout_s=1.0)
    assert time.monotonic() - start < 30


def test_oversized_request_is_refused_with_the_limit_named(serve, images):
    server = serve([PIXEL], max_request_mb=0.001)  # 1 KiB; one 16x16 RGB image is 768 bytes + header
    runtime = client(server.url, {PIXEL: 1.0})
    try:
        with pytest.raises(RewardError, match=r"at most 0.0 MiB \(its --max-request-mb\)"):
            runtime.score(images, ["p"] * 6, [])
        runtime.max_request_bytes = None  # a client that skips the check: the server refuses it itself
        with pytest.raises(RewardError, match=r"HTTP 413.*raise the server's --max-request-mb"):
            runtime.score(images, ["p"] * 6, [])
    finally:
        runtime.close()


def test_slow_server_times_out_without_hanging(serve, images):
    server = serve([PIXEL], kwargs={PIXEL: {"delay_s": 6.0}})
    runtime = client(server.url, {PIXEL: 1.0}, batch_size=6, timeout_s=0.5)
    start = time.monotonic()
    try:
        with pytest.raises(RewardError, match=r"no answer for samples \[0, 6\) of 6 within reward.timeout_s=0.5"):
            runtime.score(images, ["p"] * 6, [])
    finally:
        runtime.close()
    assert time.monotonic() - start < 5.0  # the scorer is still sleeping: the client did not wait for it


def test_scorer_failures_on_the_server_name_the_reward_and_the_server(serve, images):
    server = serve(
        ["reward_fakes:RaisingReward", "reward_fakes:NanReward"],
        kwargs={"reward_fakes:NanReward": {"bad_prompt": "p3"}},
    )
    prompts = [f"p{i}" for i in range(6)]
    for name, pattern in (
        ("reward_fakes:RaisingReward", r"HTTP 422.*failed on samples \[0, 2\).*scorer exploded"),
        ("reward_fakes:NanReward", r"HTTP 422.*non-finite score nan to sample 1 \(prompt 'p3'\)"),
    ):
        runtime = client(server.url, {name: 1.0})
        try:
            with pytest.raises(RewardError, match=pattern) as err:
                runtime.score(images, prompts, [])
            assert server.url in str(err.value) and name in str(err.value)
        finally:
            runtime.close()


def malformed_server(score_body: bytes, content_type="application/json"):
    """A server that follows the protocol until /v1/score, which answers `score_body`."""
    from aiohttp import web

    async def score(request):
        await request.read()
        return web.Response(body=score_body, content_type=content_type)

    return stub_server(score)


def stub_server(score):
    """A server answering /healthz and /v1/info as genalign's does (serving PIXEL), and
    /v1/score with the handler `score`."""
    from aiohttp import web

    app = web.Application()

    async def health(request):
        return web.json_response({"ok": True})

    async def info(request):
        return web.json_response({"components": [PIXEL], "max_request_bytes": 2**30})

    app.router.add_get("/healthz", health)
    app.router.add_get("/v1/info", info)
    app.router.add_post("/v1/score", score)
    return BackgroundServer(app)


@pytest.mark.parametrize(
    "body, pattern",
    [
        (b"<html>oops</html>", r"the reply for samples \[0, 2\) of 6 is not JSON"),
        (b'{"result": 1}', r"malformed reply for samples \[0, 2\).*no 'scores' mapping"),
        (b'{"scores": {"reward_fakes:MeanPixelReward": [0.5]}}', r"malformed reply.*1 scores for reward.*2 samples"),
        (b'{"scores": {"reward_fakes:MeanPixelReward": ["a", "b"]}}', r"malformed reply.*no list of numbers"),
        (b'{"scores": {"reward_fakes:MeanPixelReward": [0.5, NaN]}}', r"non-finite score nan to sample 1"),
    ],
)
def test_malformed_reply_is_a_clear_error(token, images, body, pattern):
    server = malformed_server(body)
    runtime = client(server.url, {PIXEL: 1.0})
    try:
        with pytest.raises(RewardError, match=pattern):
            runtime.score(images, [f"p{i}" for i in range(6)], [])
    finally:
        runtime.close()
        server.stop()


def test_a_dropped_connection_is_retried_once(token, images, fakes_on_path):
    """The first POST's connection is cut (as a killed server's would be); the retry scores."""
    from aiohttp import web

    cut = []
    cfg = RewardConfig(components={PIXEL: 1.0}, allow_import=FAKES, batch_size=8)
    service = RewardService({PIXEL: build_scorer(PIXEL, "cpu", {}, FAKES)}, cfg, TOKEN, ServeOptions())
    app = service.app()

    @web.middleware
    async def cut_first_post(request, handler):
        if request.method == "POST" and not cut:
            cut.append(1)
            request.transport.close()  # the connection drops with no reply
            await asyncio.sleep(0.1)
            raise web.HTTPInternalServerError()
        return await handler(request)

    app.middlewares.append(cut_first_post)
    server = BackgroundServer(app)
    runtime = client(server.url, {PIXEL: 1.0}, batch_size=6)
    try:
        scores = runtime.score(images, ["p"] * 6, [])
        assert cut and torch.equal(scores.components[PIXEL], images.float().mean(dim=(1, 2, 3)) / 255.0)
    finally:
        runtime.close()
        server.stop()


def test_http_runtime_config_is_checked_before_anything_starts():
    assert RewardConfig(runtime="http").http_problems()[0].startswith("reward.url=''")
    assert RewardConfig(runtime="http", url="ftp://x").http_problems()
    assert RewardConfig(runtime="http", url="http://10.0.0.5:8700").http_problems() == []
    assert RewardConfig(runtime="http", url="http://[::1]:8700").http_problems() == []
    for url, reason in (("http://[::1", "Invalid IPv6 URL"), ("http://h:99999", "Port out of range")):
        (problem,) = RewardConfig(runtime="http", url=url).http_problems()  # urlsplit's ValueError, as a message
        assert problem.startswith(f"reward.url={url!r} is not a URL ({reason}")


def test_http_runtime_is_checked_by_the_config_loader(monkeypatch, tmp_path):
    from genalign.config.errors import ConfigError
    from genalign.preflight.files import file_problems
    from genalign.preflight.load import load_config

    with pytest.raises(ConfigError, match=r"reward.url='': reward.runtime=http needs the reward server's URL"):
        load_config("experiment/toy/shapes_grpo", ["reward.runtime=http"])
    cfg = load_config(
        "experiment/toy/shapes_grpo",
        [
            "reward.runtime=http",
            "reward.url=http://10.0.0.5:8700",
            f"trainer.output_dir={tmp_path / 'run'}",
            "reward.kwargs.toy_shape.path=/no/such/classifier",
        ],
    )
    monkeypatch.delenv("GENALIGN_REWARD_TOKEN", raising=False)
    assert file_problems(cfg) == [
        "reward.runtime=http: $GENALIGN_REWARD_TOKEN (reward.token_env) is not set; export the reward server's token"
    ]
    monkeypatch.setenv("GENALIGN_REWARD_TOKEN", "t")
    assert file_problems(cfg) == []  # the scorers' files are the server's to have


def test_a_throttled_client_retries_after_the_servers_retry_after(token, images):
    """429 (this address sent wrong tokens) is "not now", like 503: waited out within reward.timeout_s."""
    from aiohttp import web

    answers = [429, 429]

    async def score(request):
        await request.read()
        if answers:
            return web.json_response(
                {"error": "too many wrong tokens"}, status=answers.pop(), headers={"Retry-After": "1"}
            )
        return web.json_response({"scores": {PIXEL: [0.5, 0.5]}})

    server = stub_server(score)
    runtime = client(server.url, {PIXEL: 1.0})
    try:
        scores = runtime.score(images[:2], ["p", "q"], [])
        assert answers == [] and scores.components[PIXEL].tolist() == [0.5, 0.5]
    finally:
        runtime.close()
        server.stop()
