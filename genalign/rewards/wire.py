"""The reward service's wire format: what `reward.runtime=http` sends and what the server answers.

Where it fits: `http_runtime.py` (the trainer's client) encodes each chunk of a rollout batch
with `encode_request`; `server.py` (`genalign serve-reward`) decodes it, scores, and answers
with `encode_reply`; the client reads the answer with `decode_reply`.

Request body: one safetensors file. The tensor "images" holds the raw uint8 media exactly as
the trainer decoded it ([B, 3, H, W], or [B, F, 3, H, W] for video) — 3 bytes a pixel, no
image codec, so scores are bit-identical to scoring in-process, and nothing is ever
unpickled. The prompts, per-sample metadata (JSON: what the manifest carried) and the
component names to score travel as one JSON string in the safetensors header's
`__metadata__` mapping (the format's own place for string data).

Reply: JSON `{"scores": {component: [float, ...]}}` on success (a float32 printed by Python
and read back is the same float32), or `{"error": "..."}` with a non-200 status.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from typing import Any

import torch

CONTENT_TYPE = "application/octet-stream"
SCORE_PATH = "/v1/score"
INFO_PATH = "/v1/info"
HEALTH_PATH = "/healthz"


def require_aiohttp() -> None:
    """The service and its client run on aiohttp (an extra); say how to install it when absent."""
    try:
        import aiohttp  # noqa: F401
    except ImportError as exc:
        raise ImportError(
            "the reward service (genalign serve-reward, reward.runtime=http) needs aiohttp: "
            "pip install 'genalign[serve]'"
        ) from exc


class WireError(ValueError):
    """A request or reply that does not follow the format; the message says what is wrong."""


@dataclass
class ScoreRequest:
    images: torch.Tensor
    """uint8 [B, 3, H, W] or [B, F, 3, H, W]."""
    prompts: list[str]
    metadata: list[dict[str, Any]]
    """One dict per sample (empty dicts when the batch has none)."""
    components: list[str]
    """Served component names to score this batch with."""


def encode_request(request: ScoreRequest) -> bytes:
    from safetensors.torch import save

    try:
        header = json.dumps(
            {"prompts": request.prompts, "metadata": request.metadata, "components": request.components}
        )
    except TypeError as exc:
        raise WireError(
            f"prompt metadata must be JSON (strings, numbers, lists, mappings) to be sent to a reward server: {exc}"
        ) from exc
    return save({"images": request.images.contiguous().cpu()}, metadata={"request": header})


def _header_metadata(body: bytes) -> dict[str, str]:
    """The safetensors header's `__metadata__` (8-byte little-endian length, then JSON)."""
    if len(body) < 8:
        raise WireError(f"request body of {len(body)} bytes is not a safetensors file")
    (length,) = struct.unpack("<Q", body[:8])
    if length > len(body) - 8:
        raise WireError(f"safetensors header claims {length} bytes; the body has {len(body) - 8}")
    header = _json(body[8 : 8 + length], "the safetensors header")
    if not isinstance(header, dict) or not isinstance(header.get("__metadata__"), dict):
        raise WireError("safetensors header has no __metadata__ mapping with the request")
    return header["__metadata__"]


def _json(text: bytes | str, what: str) -> Any:
    """Parsed JSON, or a WireError: malformed text, bytes that are not UTF-8, or nesting deeper
    than Python's recursion limit (a hostile header of 100 000 brackets)."""
    try:
        return json.loads(text)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise WireError(f"{what} is not JSON: {exc}") from exc
    except RecursionError as exc:
        raise WireError(f"{what} nests JSON too deeply to parse") from exc


def decode_request(body: bytes) -> ScoreRequest:
    """Bytes from `encode_request` -> ScoreRequest; anything else is a WireError saying why."""
    from safetensors.torch import load

    meta = _header_metadata(body)
    try:
        fields = _json(meta["request"], "the request's __metadata__.request")
        prompts, metadata, components = fields["prompts"], fields["metadata"], fields["components"]
    except (KeyError, TypeError) as exc:
        raise WireError(
            f"the request's __metadata__.request must be JSON with prompts, metadata and "
            f"components: {type(exc).__name__}: {exc}"
        ) from exc
    try:
        tensors = load(body)
    except Exception as exc:  # safetensors raises its own SafetensorError for a corrupt body
        raise WireError(f"request body is not a valid safetensors file: {exc}") from exc
    if set(tensors) != {"images"}:
        raise WireError(f"request must hold exactly one tensor 'images', got {sorted(tensors)}")
    if tensors["images"].ndim == 0 or tensors["images"].shape[0] == 0:
        raise WireError("request holds no images; send at least one")
    if not (isinstance(prompts, list) and all(isinstance(p, str) for p in prompts)):
        raise WireError("request prompts must be a list of strings")
    if not (isinstance(metadata, list) and all(isinstance(m, dict) for m in metadata)):
        raise WireError("request metadata must be a list of mappings")
    if not (isinstance(components, list) and components and all(isinstance(c, str) for c in components)):
        raise WireError("request components must be a non-empty list of reward names")
    return ScoreRequest(tensors["images"], prompts, metadata, components)


def encode_reply(scores: dict[str, torch.Tensor]) -> dict[str, Any]:
    """{name: float32 [B]} -> the JSON-able reply."""
    return {"scores": {name: values.tolist() for name, values in scores.items()}}


def decode_reply(reply: Any, components: list[str], count: int) -> dict[str, torch.Tensor]:
    """A parsed JSON reply -> {name: float32 [count]}; a reply of any other shape is a WireError."""
    scores = reply.get("scores") if isinstance(reply, dict) else None
    if not isinstance(scores, dict):
        raise WireError(f"reply has no 'scores' mapping: {str(reply)[:200]!r}")
    out = {}
    for name in components:
        values = scores.get(name)
        if not (
            isinstance(values, list) and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)
        ):
            raise WireError(f"reply has no list of numbers for reward {name!r}: {str(values)[:200]!r}")
        if len(values) != count:
            raise WireError(f"reply has {len(values)} scores for reward {name!r}; {count} samples were sent")
        out[name] = torch.tensor(values, dtype=torch.float32)
    return out
