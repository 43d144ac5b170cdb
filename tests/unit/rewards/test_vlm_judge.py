"""vlm_judge against a small OpenAI-compatible chat server on loopback: the request it sends,
parsing, retries, timeouts and errors."""

from __future__ import annotations

import asyncio
import base64
import io
import time

import numpy
import pytest
import torch

from genalign.rewards.base import RewardError
from genalign.rewards.composite import build_reward_runtime
from genalign.rewards.config import RewardConfig
from genalign.rewards.server import BackgroundServer
from genalign.rewards.vlm_judge import VlmJudgeOptions, VlmJudgeReward, parse_score


class FakeJudge:
    """/v1/chat/completions answering "Final Score: <1 + 4 * mean red of the image>"; `script`
    replaces the first answers: ("status", code), ("text", content), ("sleep", seconds)."""

    def __init__(self, script=()):
        from aiohttp import web

        self.script = list(script)
        self.requests = []
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self.chat)
        self.server = BackgroundServer(app)
        self.base_url = self.server.url + "/v1"

    async def chat(self, request):
        from aiohttp import web
        from PIL import Image

        body = await request.json()
        self.requests.append((dict(request.headers), body))
        action = self.script.pop(0) if self.script else ("score", None)
        if action[0] == "status":
            return web.json_response({"error": "boom"}, status=action[1])
        if action[0] == "sleep":
            await asyncio.sleep(action[1])
        if action[0] == "raw":
            return web.Response(text=action[1])
        content = body["messages"][0]["content"]
        url = [item for item in content if item["type"] == "image_url"][-1]["image_url"]["url"]  # the result
        assert url.startswith("data:image/png;base64,")
        picture = Image.open(io.BytesIO(base64.b64decode(url.split(",", 1)[1])))
        red = torch.from_numpy(numpy.array(picture.convert("RGB"))).float()[..., 0].mean() / 255
        text = action[1] if action[0] == "text" else f"The image is fine.\nFinal Score: {1 + 4 * red.item():.2f}"
        return web.json_response({"choices": [{"message": {"role": "assistant", "content": text}}]})

    def stop(self):
        self.server.stop()


@pytest.fixture
def judge_server(request):
    servers = []

    def start(script=()):
        servers.append(FakeJudge(script))
        return servers[-1]

    yield start
    for server in servers:
        server.stop()


def solid(values):
    """One 8x8 image per value, red channel = value, green/blue 0."""
    images = torch.zeros(len(values), 3, 8, 8, dtype=torch.uint8)
    images[:, 0] = torch.tensor(values, dtype=torch.uint8).view(-1, 1, 1)
    return images


def test_sends_the_image_and_template_and_parses_the_score(judge_server, monkeypatch):
    monkeypatch.setenv("GENALIGN_JUDGE_API_KEY", "sk-test")
    server = judge_server()
    judge = VlmJudgeReward(base_url=server.base_url, model="judge-7b", image_size=16)
    scores = judge.score(solid([0, 255, 51]), ["a cat", "a dog", "a fox"], [{}] * 3)
    # the fake reads the red channel back from the PNG: 1 + 4 * red, then / 5
    assert torch.allclose(scores, torch.tensor([1.0, 5.0, 1 + 4 * 0.2]) / 5, atol=1e-6)
    headers, body = server.requests[0]
    assert headers["Authorization"] == "Bearer sk-test"
    assert body["model"] == "judge-7b" and body["temperature"] == 0.0 and "max_tokens" not in body
    text = body["messages"][0]["content"][1]["text"]
    assert "Text Caption: [a cat]" in text and "after 'Final Score:'" in text


def test_an_editing_prompt_sends_its_source_then_the_result_with_the_edit_question(judge_server, tmp_path):
    """A sample whose metadata carries a source image: [source, result, edit question]; the
    score is the judge's answer about the result (the fake reads the last image)."""
    from PIL import Image

    from genalign.data.source_images import SOURCE_KEY

    source = tmp_path / "source.png"
    Image.fromarray(numpy.full((8, 8, 3), 200, dtype=numpy.uint8)).save(source)
    server = judge_server()
    judge = VlmJudgeReward(base_url=server.base_url, image_size=0)
    metadata = [{SOURCE_KEY: [str(source)]}, {SOURCE_KEY: [str(source)]}]
    scores = judge.score(solid([0, 255]), ["make it red", "make it blue"], metadata)
    assert torch.allclose(scores, torch.tensor([1.0, 5.0]) / 5, atol=1e-6)
    content = server.requests[0][1]["messages"][0]["content"]
    assert [item["type"] for item in content] == ["image_url", "image_url", "text"]
    shown = Image.open(io.BytesIO(base64.b64decode(content[0]["image_url"]["url"].split(",", 1)[1])))
    assert numpy.array(shown.convert("RGB"))[0, 0].tolist() == [200, 200, 200]  # the source comes first
    text = content[2]["text"]
    assert "Editing instruction: [make it red]" in text and "after 'Final Score:'" in text


def test_templates_must_name_the_prompt():
    with pytest.raises(ValueError, match="edit_template must contain"):
        VlmJudgeOptions(edit_template="no placeholder")


def test_parse_score_follows_the_pattern():
    pattern = VlmJudgeOptions().score_pattern
    assert parse_score("blah\nFinal Score: 4.5", pattern, 5.0) == 0.9
    assert parse_score("Final Score: 7", pattern, 5.0) is None  # outside 1-5
    assert parse_score("I like it", pattern, 5.0) is None


def test_transient_failures_are_retried(judge_server, monkeypatch):
    monkeypatch.setattr("genalign.rewards.vlm_judge.RETRY_BACKOFF_S", 0.01)
    server = judge_server([("status", 503), ("raw", "not json"), ("text", "no number here")])
    judge = VlmJudgeReward(base_url=server.base_url, max_retries=3)
    judge_retry = judge.score(solid([255]), ["p"], [{}])
    assert judge_retry.tolist() == [1.0] and len(server.requests) == 4


def test_a_reply_without_a_score_is_an_error_unless_a_score_is_named(judge_server):
    server = judge_server([("text", "I refuse")] * 2)
    judge = VlmJudgeReward(base_url=server.base_url, max_retries=1)
    with pytest.raises(RewardError, match=r"sample 0 \(prompt 'a cat'\): no score after 2 tries.*I refuse"):
        judge.score(solid([0]), ["a cat"], [{}])
    server = judge_server([("text", "I refuse")])
    flow_grpo = VlmJudgeReward(base_url=server.base_url, max_retries=0, unparsed_score=0.0)
    assert flow_grpo.score(solid([0]), ["a cat"], [{}]).tolist() == [0.0]


def test_wrong_model_or_key_fails_at_once(judge_server):
    server = judge_server([("status", 404)])
    judge = VlmJudgeReward(base_url=server.base_url, max_retries=5)
    with pytest.raises(RewardError, match=r"HTTP 404 \(check reward.kwargs.vlm_judge.model"):
        judge.score(solid([0]), ["p"], [{}])
    assert len(server.requests) == 1


def test_a_slow_judge_times_out_and_an_absent_one_fails(judge_server):
    server = judge_server([("sleep", 5.0)] * 2)
    judge = VlmJudgeReward(base_url=server.base_url, timeout_s=0.3, max_retries=1)
    start = time.monotonic()
    with pytest.raises(RewardError, match=r"no reply within reward.kwargs.vlm_judge.timeout_s=0.3"):
        judge.score(solid([0]), ["p"], [{}])
    assert time.monotonic() - start < 4.5
    absent = VlmJudgeReward(base_url="http://127.0.0.1:9/v1", max_retries=0)
    with pytest.raises(RewardError, match=r"vlm_judge at http://127.0.0.1:9/v1/chat/completions.*connection failed"):
        absent.score(solid([0]), ["p"], [{}])


def test_through_the_runtime_with_typed_options(judge_server):
    server = judge_server()
    cfg = RewardConfig(
        components={"vlm_judge": 1.0},
        batch_size=2,
        kwargs={"vlm_judge": {"base_url": server.base_url, "concurrency": 2}},
    )
    scores = build_reward_runtime(cfg, "cpu").score(solid([0, 255, 0]), ["a", "b", "c"], [])
    assert torch.equal(scores.components["vlm_judge"], torch.tensor([0.2, 1.0, 0.2]))
    with pytest.raises(TypeError, match="reward.kwargs.vlm_judge.base_ur"):
        VlmJudgeReward(base_ur="x")
    with pytest.raises(ValueError, match="template must contain {prompt}"):
        VlmJudgeReward(template="rate it")
