"""The reward server under load and abuse, on loopback in this process: requests split and shared
fairly, a gone client's work dropped, bytes in flight bounded before reading, slow and idle
connections closed and capped, every malformed request a JSON 4xx, wrong tokens throttled per
address. Timing is never asserted: every wait is bounded generously and each check is an order
or a count."""

from __future__ import annotations

import http.client
import json
import logging
import socket
import threading
import time

import pytest
import torch

from genalign.rewards.wire import ScoreRequest, encode_request

TOKEN = "server-test-token-0123456789abcdefghij"
PROBE = "reward_fakes:CallSizeProbe"
WAIT_S = 120.0  # generous: the box is shared


@pytest.fixture
def serve(start_reward_server):
    """serve(batch_size=..., delay_s=..., **ServeOptions fields) -> a running server of the probe scorer."""

    def start(batch_size=2, delay_s=0.0, **options):
        import reward_fakes

        reward_fakes.CALL_SIZES.clear()
        reward_fakes.CALL_PROMPTS.clear()
        return start_reward_server({PROBE: {"delay_s": delay_s}}, TOKEN, batch_size, **options)

    return start


def address(server) -> tuple[str, int]:
    host, port = server.url.removeprefix("http://").rsplit(":", 1)
    return host, int(port)


def body_of(count: int, tag: str, size: int = 8) -> bytes:
    images = torch.full((count, 3, size, size), 7, dtype=torch.uint8)
    return encode_request(ScoreRequest(images, [f"{tag}{i}" for i in range(count)], [{}] * count, [PROBE]))


def call(
    server,
    method: str,
    path: str,
    body: bytes | None = None,
    token: str | None = TOKEN,
    source: str | None = None,
    headers: dict | None = None,
) -> tuple[int, dict, object]:
    """(status, headers, parsed JSON body) of one request on a fresh connection."""
    connection = http.client.HTTPConnection(
        *address(server), timeout=WAIT_S, source_address=(source, 0) if source else None
    )
    sent = dict(headers or {})
    if token is not None:
        sent["Authorization"] = f"Bearer {token}"
    try:
        connection.request(method, path, body=body, headers=sent)
        response = connection.getresponse()
        return response.status, dict(response.getheaders()), json.loads(response.read())
    finally:
        connection.close()


def raw(server, data: bytes, source: str | None = None) -> bytes:
    """Send `data` as is; everything the server answers until it closes the connection."""
    with socket.create_connection(
        address(server), timeout=WAIT_S, source_address=(source, 0) if source else None
    ) as sock:
        sock.sendall(data)
        received = b""
        while chunk := sock.recv(65536):
            received += chunk
    return received


def closed_by_server(sock: socket.socket) -> bool:
    """Whether the server closed `sock` (an end of file, or a reset: it closed with our bytes unread)."""
    try:
        return sock.recv(65536) == b""
    except ConnectionResetError:
        return True


def wait_until(condition, what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        assert time.monotonic() < deadline, f"not within {WAIT_S} s: {what}"
        time.sleep(0.05)


# ---------------------------------------------------------------- fairness and cancellation
def test_a_large_request_is_split_and_a_later_small_one_is_scored_between_its_calls(serve):
    import reward_fakes

    server = serve(batch_size=2, delay_s=0.2)
    big: list = []
    sender = threading.Thread(target=lambda: big.append(call(server, "POST", "/v1/score", body_of(30, "big"))))
    sender.start()
    wait_until(lambda: reward_fakes.CALL_SIZES, "the large request's first call")
    status, _, reply = call(server, "POST", "/v1/score", body_of(2, "small"))
    sender.join(timeout=WAIT_S)
    assert status == 200 and len(reply["scores"][PROBE]) == 2
    assert big[0][0] == 200 and len(big[0][2]["scores"][PROBE]) == 30  # split, and whole again in the reply
    calls = reward_fakes.CALL_PROMPTS
    assert max(reward_fakes.CALL_SIZES) <= 2 and sum(reward_fakes.CALL_SIZES) == 32
    small_call = next(i for i, prompts in enumerate(calls) if "small0" in prompts)
    last_big_call = max(i for i, prompts in enumerate(calls) if any(p.startswith("big") for p in prompts))
    assert small_call < last_big_call  # answered between the large request's calls, not after all 15


def test_the_work_of_a_client_that_disconnected_is_dropped(serve):
    import reward_fakes

    server = serve(batch_size=2, delay_s=0.3)
    body = body_of(40, "gone")
    head = (
        f"POST /v1/score HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode()
    with socket.create_connection(address(server), timeout=WAIT_S) as sock:
        sock.sendall(head + body)
        wait_until(lambda: reward_fakes.CALL_SIZES, "the first call")
    # the client is gone after (at most a few) calls of 2; the 20 calls of its request are not all made
    status, _, _ = call(server, "POST", "/v1/score", body_of(2, "after"))  # queued behind what is left
    assert status == 200
    scored_for_gone = sum(len([p for p in prompts if p.startswith("gone")]) for prompts in reward_fakes.CALL_PROMPTS)
    assert scored_for_gone < 40


def test_scheduler_rotates_clients_and_requests():
    """next_call: one call per turn, the client and the request that led going to the back."""
    from genalign.rewards.server_scheduler import FairScheduler

    loop = asyncio_loop()

    async def plan():
        scheduler = FairScheduler(lambda request: {}, None, batch_size=4, max_jobs=64)
        a1 = scheduler.submit(
            "A", ScoreRequest(torch.zeros(10, 3, 2, 2, dtype=torch.uint8), ["a"] * 10, [{}] * 10, ["x"])
        )
        b1 = scheduler.submit("B", ScoreRequest(torch.zeros(2, 3, 2, 2, dtype=torch.uint8), ["b"] * 2, [{}] * 2, ["x"]))
        a2 = scheduler.submit("A", ScoreRequest(torch.zeros(1, 3, 2, 2, dtype=torch.uint8), ["c"], [{}], ["x"]))
        video = scheduler.submit("C", ScoreRequest(torch.zeros(1, 2, 3, 2, 2, dtype=torch.uint8), ["v"], [{}], ["x"]))
        names = {id(a1): "a1", id(b1): "b1", id(a2): "a2", id(video): "video"}
        calls = []
        while pieces := scheduler.next_call():
            calls.append([(names[id(p.job)], p.start, p.end) for p in pieces])
        return calls

    calls = loop.run_until_complete(plan())
    loop.close()
    assert calls == [
        [("a1", 0, 4)],  # A leads with its oldest request and fills the call
        [("b1", 0, 2), ("a2", 0, 1), ("a1", 4, 5)],  # B first; A's other request before a1's rest
        [("video", 0, 1)],  # another shape: a call of its own (it could not share one)
        [("a1", 5, 9)],
        [("a1", 9, 10)],
    ]


def asyncio_loop():
    import asyncio

    return asyncio.new_event_loop()


# ---------------------------------------------------------------- bytes, connections, timeouts
def test_bytes_in_flight_are_bounded_before_a_body_is_read(serve):
    server = serve(max_request_mb=0.01, max_inflight_mb=0.015, body_timeout_s=3.0)
    declared = 9000  # bytes; two of them pass the 0.015 MiB (15 728 bytes) in flight
    head = (
        f"POST /v1/score HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\nContent-Length: {declared}\r\n\r\n"
    ).encode()
    with socket.create_connection(address(server), timeout=WAIT_S) as holder:
        holder.sendall(head + b"x" * 10)  # headers accepted, the body never finishes: its bytes are reserved
        time.sleep(0.5)
        status, _, reply = call(server, "POST", "/v1/score", b"y" * declared)
        assert status == 503 and "in flight" in reply["error"] and "--max-inflight-mb" in reply["error"]
        answer = b""
        while chunk := holder.recv(65536):  # the body deadline ends the holder: 408, connection closed
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 408") and b"--body-timeout-s" in answer
    status, _, reply = call(server, "POST", "/v1/score", body_of(2, "ok"))  # the budget is free again
    assert status == 200


def slow_connection(server, source: str) -> socket.socket:
    """A slowloris connection from `source`: half a request, never finished."""
    sock = socket.create_connection(address(server), timeout=WAIT_S, source_address=(source, 0))
    sock.sendall(b"POST /v1/score HTTP/1.1\r\nHost: x\r\n")
    return sock


def test_connections_past_the_cap_close_the_oldest_that_sent_no_request(serve):
    """Twelve addresses hold one slow connection each against a cap of 8: each one past the cap
    closes the oldest of them; a valid client is still served, and the newest 7 are left."""
    server = serve(max_connections=8, header_timeout_s=WAIT_S)
    slow = [slow_connection(server, f"127.0.0.{10 + i}") for i in range(12)]
    try:
        time.sleep(0.5)
        status, _, reply = call(server, "POST", "/v1/score", body_of(2, "valid"))
        assert status == 200 and len(reply["scores"][PROBE]) == 2
        assert all(closed_by_server(sock) for sock in slow[:5])  # the valid client's connection closed a 5th
        for sock in slow[5:]:
            sock.setblocking(False)
            with pytest.raises(BlockingIOError):  # open, nothing to read
                sock.recv(1)
    finally:
        for sock in slow:
            sock.close()


def test_one_address_holds_at_most_its_share_and_slow_headers_are_closed(serve):
    server = serve(max_connections=8, max_connections_per_address=3, header_timeout_s=1.0)
    slow = [slow_connection(server, "127.0.0.3") for _ in range(6)]
    try:
        for sock in slow[3:]:  # past the address's quota: a 503 at once
            answer = sock.recv(65536)
            assert answer.startswith(b"HTTP/1.1 503") and b"--max-connections-per-address" in answer
        status, _, _ = call(server, "POST", "/v1/score", body_of(2, "valid"))  # another address: served
        assert status == 200
        for sock in slow[:3]:  # the header deadline closes the admitted ones
            assert closed_by_server(sock)
    finally:
        for sock in slow:
            sock.close()


def test_a_new_connection_finding_every_slot_inside_a_request_gets_a_503(serve):
    server = serve(max_connections=1, delay_s=2.0, batch_size=2)
    busy = threading.Thread(target=call, args=(server, "POST", "/v1/score", body_of(2, "busy")))
    busy.start()
    try:
        import reward_fakes

        wait_until(lambda: reward_fakes.CALL_SIZES, "the busy request inside its handler")
        answer = raw(server, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        assert answer.startswith(b"HTTP/1.1 503") and b"--max-connections" in answer
    finally:
        busy.join(timeout=WAIT_S)


# ---------------------------------------------------------------- malformed requests
def score_head(length: int | str, token: bytes = b"Bearer " + TOKEN.encode()) -> bytes:
    return (
        b"POST /v1/score HTTP/1.1\r\nHost: x\r\nConnection: close\r\nAuthorization: "
        + token
        + f"\r\nContent-Length: {length}\r\n\r\n".encode()
    )


DEEP = b"[" * 100_000 + b"]" * 100_000
MALFORMED = {
    "authorization-not-utf8": (
        b"GET /v1/info HTTP/1.1\r\nHost: x\r\nConnection: close\r\nAuthorization: Bearer \xff\xfe\x80\r\n\r\n",
        401,
        "wrong or missing token",
    ),
    "content-length-1e12": (score_head(10**12), 413, "exceeds the server's --max-request-mb"),
    "chunked": (
        b"POST /v1/score HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
        + TOKEN.encode()
        + b"\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        411,
        "Content-Length",
    ),
    "deep-json-header": (
        score_head(len(DEEP) + 8) + len(DEEP).to_bytes(8, "little") + DEEP,
        400,
        "nests JSON too deeply",
    ),
    "zero-images": (score_head(len(body_of(0, "z"))) + body_of(0, "z"), 400, "holds no images"),
    "not-safetensors": (score_head(11) + b"hello world", 400, "safetensors"),
    "unknown-path": (b"GET /admin HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", 404, "GET /admin"),
    "wrong-method": (b"DELETE /v1/score HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", 405, "DELETE"),
}


@pytest.mark.parametrize("case", MALFORMED, ids=list(MALFORMED))
def test_every_malformed_request_is_a_json_4xx_without_a_traceback(case, serve, caplog):
    server = serve()
    data, status, fragment = MALFORMED[case]
    with caplog.at_level(logging.DEBUG):
        answer = raw(server, data)
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(f"HTTP/1.1 {status}".encode()), answer[:300]
    assert b"application/json" in head and fragment in json.loads(body)["error"]
    assert "Traceback" not in caplog.text and not any(r.exc_info for r in caplog.records)


def test_healthz_reveals_nothing(serve):
    server = serve()
    status, headers, reply = call(server, "GET", "/healthz", token=None)
    assert status == 200 and reply == {"ok": True}
    assert headers["Server"] == "genalign"  # not aiohttp's default, which names its version and Python's


def test_wrong_tokens_are_throttled_per_client_address(serve):
    server = serve()
    statuses = [call(server, "GET", "/v1/info", token="guess", source="127.0.0.2")[0] for _ in range(12)]
    assert statuses[:10] == [401] * 10 and statuses[10:] == [429, 429]
    status, headers, reply = call(server, "GET", "/v1/info", source="127.0.0.2")  # right token, still throttled
    assert status == 429 and int(headers["Retry-After"]) > 0 and "too many wrong tokens" in reply["error"]
    status, _, reply = call(server, "GET", "/v1/info", source="127.0.0.1")  # another address is not affected
    assert status == 200 and reply["components"] == [PROBE]


def test_log_lines_a_flood_can_cause_are_rate_limited():
    from genalign.rewards.server_limits import RateLimitFilter

    limiter = RateLimitFilter(burst=3, period_s=3600)
    records = [
        logging.LogRecord(
            "aiohttp.server", logging.ERROR, __file__, 1, "Error handling request from %s", ("1.2.3.4",), None
        )
        for _ in range(1000)
    ]
    assert sum(limiter.filter(record) for record in records) == 3


def test_a_clients_malformed_http_is_logged_as_one_line():
    from aiohttp.http_exceptions import BadStatusLine

    from genalign.rewards.server_limits import RateLimitFilter

    try:
        raise BadStatusLine("garbage")
    except BadStatusLine:
        import sys

        record = logging.LogRecord(
            "aiohttp.server", logging.ERROR, __file__, 1, "Error handling request from %s", ("1.2.3.4",), sys.exc_info()
        )
    assert RateLimitFilter().filter(record)
    assert record.exc_info is None and record.levelno == logging.WARNING
    assert record.getMessage().startswith("Error handling request from 1.2.3.4: BadStatusLine")


# ---------------------------------------------------------------- the token
@pytest.mark.parametrize(
    "token, public, insecure, problem",
    [
        ("a", False, False, None),  # loopback: any token
        ("a", True, False, "too weak"),
        ("ab" * 20, True, False, "2 distinct"),
        ("a", True, True, None),  # --insecure-token
        ("x" * 10 + " y" * 20, False, False, "printable ASCII"),
        ("Kq3v_9Lr-Zt2Wm8Yp4Hs7Nc1Bd6Fg0Jx5Ua", True, False, None),
    ],
)
def test_a_public_bind_needs_a_strong_token(token, public, insecure, problem):
    from genalign.rewards.server_limits import token_problems

    problems = token_problems(token, "GENALIGN_REWARD_TOKEN", public, insecure)
    assert (problems == []) if problem is None else (problem in problems[0])
