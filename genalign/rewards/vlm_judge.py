"""VLM judge: a vision-language model served behind an OpenAI-compatible chat endpoint rates each
image against its prompt (UnifiedReward-style scoring).

Where it fits: a reward scored by the reward runtime like any other, whose model runs
elsewhere — vLLM (`vllm serve CodeGoat24/UnifiedReward-qwen-7b`) or SGLang
(`python -m sglang.launch_server`) expose `POST {base_url}/chat/completions`. For every
sample the scorer sends one chat request: a user message with the image as a base64 PNG data
URL and the scoring template filled with the prompt, at temperature 0 (for an editing prompt,
whose metadata carries its source images, the sources come first and the question is
`edit_template`, so the judge sees source -> result); it reads the first
number the reply's `score_pattern` captures and divides it by `score_scale`.

Defaults follow Flow-GRPO's `unifiedreward_score_sglang` (flow_grpo/rewards.py): its
UnifiedReward template ("... assign a score from 1 to 5 after 'Final Score:'"), the pattern
`Final Score:\\s*([1-5](?:\\.\\d+)?)`, images resized to 512x512, score / 5. One deliberate
difference, a named option: a reply with no score is retried and then an error, where
Flow-GRPO scores it 0.0 (a silent zero biases the group's advantages); set
`unparsed_score: 0.0` for Flow-GRPO's behaviour.

Requests run concurrently (`concurrency` at a time) on an asyncio loop owned by the call;
each is bounded by `timeout_s` and retried up to `max_retries` times on a dropped connection,
an HTTP 5xx/429, a timeout or a reply without a score, with exponential back-off. Any other
HTTP status (401, 404: wrong key or model name) fails at once. An error names the endpoint,
the sample and its prompt, and the judge's last reply.
"""

from __future__ import annotations

import asyncio
import base64
import io
import json
import os
import re
from dataclasses import dataclass
from typing import Any

import torch

from genalign.rewards.base import RewardError, source_images
from genalign.rewards.options import parse_options
from genalign.rewards.wire import require_aiohttp

UNIFIED_REWARD_TEMPLATE = (
    "<image>\nYou are given a text caption and a generated image based on that caption. Your task is to evaluate "
    "this image based on two key criteria:\n1. Alignment with the Caption: Assess how well this image aligns with "
    "the provided caption. Consider the accuracy of depicted objects, their relationships, and attributes as "
    "described in the caption.\n2. Overall Image Quality: Examine the visual quality of this image, including "
    "clarity, detail preservation, color accuracy, and overall aesthetic appeal.\nBased on the above criteria, "
    "assign a score from 1 to 5 after 'Final Score:'.\nYour task is provided as follows:\nText Caption: [{prompt}]"
)
"""Flow-GRPO's UnifiedReward question; `{prompt}` is replaced by the sample's prompt."""

EDIT_TEMPLATE = (
    "You are given a source image, an editing instruction and the image an editing model made from "
    "them (the last image). Evaluate the edited image on two criteria:\n1. Instruction following: "
    "is the requested change made, completely and only where the instruction asks?\n2. Consistency "
    "and quality: is everything the instruction does not mention kept as in the source image, and is "
    "the result free of artefacts?\nBased on the above criteria, assign a score from 1 to 5 after "
    "'Final Score:'.\nEditing instruction: [{prompt}]"
)
"""The question for a prompt that edits source images (its metadata carries them): the source
image(s) come first in the message, the edited result last, then this text; the same 1-5
'Final Score:' answer as the UnifiedReward template, so `score_pattern` reads both."""

RETRY_BACKOFF_S = 0.5
"""First wait before a retry; doubles with each further retry."""


@dataclass
class VlmJudgeOptions:
    base_url: str = "http://127.0.0.1:17140/v1"
    """OpenAI-compatible API root; requests go to {base_url}/chat/completions."""
    model: str = "UnifiedReward-7b-v1.5"
    """The served model name the endpoint expects (vLLM: --served-model-name)."""
    template: str = UNIFIED_REWARD_TEMPLATE
    """The question sent with each image; must contain "{prompt}"."""
    edit_template: str = EDIT_TEMPLATE
    """The question for an editing prompt, sent after its source image(s) and the result; must
    contain "{prompt}" (the instruction)."""
    score_pattern: str = r"Final Score:\s*([1-5](?:\.\d+)?)"
    """Regular expression whose first group is the score in the judge's reply."""
    score_scale: float = 5.0
    """The parsed score is divided by this (UnifiedReward's 1-5 scale -> 0.2-1)."""
    image_size: int = 512
    """Images are resized to image_size x image_size (bicubic) before sending; 0 keeps their size."""
    temperature: float = 0.0
    max_tokens: int | None = None
    """Reply length bound sent to the endpoint; None lets the server decide (as Flow-GRPO does)."""
    timeout_s: float = 120.0
    """Bound on one chat request."""
    max_retries: int = 2
    """Retries of one sample after a dropped connection, HTTP 5xx/429, a timeout or an unparsable reply."""
    concurrency: int = 32
    """Chat requests in flight at once."""
    api_key_env: str = "GENALIGN_JUDGE_API_KEY"
    """Environment variable with the endpoint's API key (sent as a Bearer token when set)."""
    unparsed_score: float | None = None
    """Score for a reply that still has no score after the retries; None (default) makes it an error.
    Flow-GRPO uses 0.0."""

    def __post_init__(self) -> None:
        problems = []
        for name in ("template", "edit_template"):
            if "{prompt}" not in getattr(self, name):
                problems.append(f"{name} must contain {{prompt}}")
        try:
            if re.compile(self.score_pattern).groups < 1:
                problems.append("score_pattern needs a capture group around the number")
        except re.error as exc:
            problems.append(f"score_pattern is not a regular expression ({exc})")
        if self.score_scale <= 0:
            problems.append(f"score_scale must be > 0, got {self.score_scale}")
        if self.image_size < 0:
            problems.append(f"image_size must be >= 0, got {self.image_size}")
        if self.timeout_s <= 0 or self.max_retries < 0 or self.concurrency < 1:
            problems.append("timeout_s must be > 0, max_retries >= 0 and concurrency >= 1")
        if problems:
            raise ValueError("reward.kwargs.vlm_judge: " + "; ".join(problems))

    def device_models(self, reward: str) -> tuple[()]:
        """Models on the scorer's device (the memory plan counts them): none: the judge is served at base_url."""
        return ()


def parse_score(text: str, pattern: str, scale: float) -> float | None:
    """The first `pattern` match's group 1 as a number / scale, or None when there is none."""
    match = re.search(pattern, text)
    if match is None:
        return None
    try:
        return float(match.group(1)) / scale
    except ValueError:
        return None


def image_data_url(image: torch.Tensor, size: int) -> str:
    """uint8 [3, H, W] -> "data:image/png;base64,..." (resized to size x size unless size is 0)."""
    from PIL import Image

    picture = Image.fromarray(image.permute(1, 2, 0).contiguous().numpy())
    if size:
        picture = picture.resize((size, size), Image.Resampling.BICUBIC)
    buffer = io.BytesIO()
    picture.save(buffer, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


class _Retryable(Exception):
    """A failure worth another try; the message is what the last try saw."""


class VlmJudgeReward:
    name = "vlm_judge"

    def __init__(self, device: str = "cpu", **kwargs: Any):
        require_aiohttp()
        self.options = parse_options(self.name, VlmJudgeOptions, kwargs)
        self.url = self.options.base_url.rstrip("/") + "/chat/completions"
        key = os.environ.get(self.options.api_key_env, "")
        self.headers = {"Authorization": f"Bearer {key}"} if key else {}

    def score(self, images: torch.Tensor, prompts: list[str], metadata: list[dict[str, Any]]) -> torch.Tensor:
        """Each result alone with `template`, or, for a prompt that edits source images, its
        sources then the result with `edit_template`."""
        size = self.options.image_size
        sources = source_images(metadata)  # [B, S, 3, H, W] uint8, or None for text-to-image prompts
        urls = []
        for index, image in enumerate(images.cpu()):
            shown = [] if sources is None else list(sources[index])
            urls.append([image_data_url(picture, size) for picture in [*shown, image]])
        return torch.tensor(asyncio.run(self._score_all(urls, prompts)), dtype=torch.float32)

    async def _score_all(self, urls: list[list[str]], prompts: list[str]) -> list[float]:
        import aiohttp

        limit = asyncio.Semaphore(self.options.concurrency)
        async with aiohttp.ClientSession(headers=self.headers) as session:
            tasks = [
                asyncio.create_task(self._score_one(session, limit, index, url, prompt))
                for index, (url, prompt) in enumerate(zip(urls, prompts))
            ]
            try:
                return list(await asyncio.gather(*tasks))
            finally:  # the first error ends the call: no request outlives it
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)

    def request_body(self, urls: list[str], prompt: str) -> dict[str, Any]:
        """One chat request: the images (an edit's sources first, the result last) and the
        question; several images mean an edit, so the question is `edit_template`."""
        opts = self.options
        template = opts.edit_template if len(urls) > 1 else opts.template
        images = [{"type": "image_url", "image_url": {"url": url}} for url in urls]
        body = {
            "model": opts.model,
            "temperature": opts.temperature,
            "messages": [
                {
                    "role": "user",
                    "content": [*images, {"type": "text", "text": template.replace("{prompt}", prompt)}],
                }
            ],
        }
        if opts.max_tokens is not None:
            body["max_tokens"] = opts.max_tokens
        return body

    async def _score_one(self, session, limit: asyncio.Semaphore, index: int, url: list[str], prompt: str) -> float:
        opts = self.options
        where = f"vlm_judge at {self.url}, sample {index} (prompt {prompt!r})"
        last = ""
        for attempt in range(opts.max_retries + 1):
            if attempt:
                await asyncio.sleep(RETRY_BACKOFF_S * 2 ** (attempt - 1))
            try:
                async with limit:
                    text = await self._ask(session, self.request_body(url, prompt), where)
            except _Retryable as exc:
                last = str(exc)
                continue
            value = parse_score(text, opts.score_pattern, opts.score_scale)
            if value is not None:
                return value
            last = f"no match for score_pattern {opts.score_pattern!r} in the reply {text[:300]!r}"
        if opts.unparsed_score is not None and last.startswith("no match"):
            return opts.unparsed_score
        raise RewardError(f"{where}: no score after {opts.max_retries + 1} tries; last: {last}")

    async def _ask(self, session, body: dict[str, Any], where: str) -> str:
        """One chat request -> the reply's message content; retryable failures raise _Retryable."""
        import aiohttp

        try:
            async with session.post(
                self.url, json=body, timeout=aiohttp.ClientTimeout(total=self.options.timeout_s)
            ) as response:
                raw = await response.read()
                status = response.status
        except asyncio.TimeoutError as exc:
            raise _Retryable(f"no reply within reward.kwargs.vlm_judge.timeout_s={self.options.timeout_s}") from exc
        except aiohttp.ClientConnectionError as exc:
            raise _Retryable(f"connection failed: {type(exc).__name__}: {exc}") from exc
        text = raw[:300].decode(errors="replace")
        if status == 429 or status >= 500:
            raise _Retryable(f"HTTP {status}: {text}")
        if status != 200:
            raise RewardError(
                f"{where}: HTTP {status} (check reward.kwargs.vlm_judge.model, base_url and "
                f"${self.options.api_key_env}): {text}"
            )
        try:
            return json.loads(raw)["choices"][0]["message"]["content"] or ""
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            raise _Retryable(f"the reply is not an OpenAI chat completion: {text!r}") from exc

    def offload(self) -> None:
        """The judge runs behind its endpoint; nothing to move."""

    def onload(self) -> None:
        """The judge runs behind its endpoint; nothing to move."""
