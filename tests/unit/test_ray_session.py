"""A local Ray started by genalign listens on loopback only (it once listened on `*`)."""

from __future__ import annotations

import ipaddress
import os
import time

import pytest

pytestmark = pytest.mark.ray


def is_loopback(host: str) -> bool:
    address = ipaddress.ip_address(host.split("%")[0])
    mapped = getattr(address, "ipv4_mapped", None)  # dual-stack sockets report ::ffff:127.0.0.1
    return (mapped or address).is_loopback


def listening(processes) -> list[tuple[int, str, str, int]]:
    import psutil

    found = []
    for process in processes:
        try:
            for conn in process.net_connections(kind="inet"):
                if conn.status == psutil.CONN_LISTEN:
                    found.append((process.pid, process.name(), conn.laddr.ip, conn.laddr.port))
        except (psutil.NoSuchProcess, psutil.ZombieProcess):
            continue
    return found


def test_local_ray_binds_every_listening_socket_to_loopback(monkeypatch):
    import psutil
    import ray
    from ray._private import ray_constants

    from genalign.ray_session import init_ray

    assert not ray.is_initialized()
    monkeypatch.delenv("GENALIGN_RAY_NODE_IP", raising=False)
    # as outside the test suite (conftest turns Ray's single-node mode on for every test)
    monkeypatch.delenv("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", raising=False)
    monkeypatch.setattr(ray_constants, "ENABLE_RAY_CLUSTER", True)
    init_ray(num_cpus=1, log_to_driver=False)
    try:

        @ray.remote(num_cpus=0)
        class Probe:  # a worker process too, not only the daemons
            def ping(self):
                return True

        probe = Probe.remote()
        assert ray.get(probe.ping.remote(), timeout=600)
        me = psutil.Process()
        deadline = time.monotonic() + 60  # the agents bind their ports a moment after start-up
        while True:
            sockets = listening([me, *me.children(recursive=True)])
            names = {name for _, name, _, _ in sockets}
            if any("raylet" in n for n in names) and any("gcs" in n for n in names) or time.monotonic() > deadline:
                break
            time.sleep(1)
        assert any("raylet" in n for n in names) and any("gcs" in n for n in names), sockets
        exposed = [s for s in sockets if not is_loopback(s[2])]
        assert exposed == [], f"Ray processes listening beyond loopback: {exposed}"
        assert ray._private.worker._global_node.node_ip_address == "127.0.0.1"
        assert ray_constants.ENABLE_RAY_CLUSTER and "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER" not in os.environ  # restored
    finally:
        ray.shutdown()


def test_a_local_start_that_times_out_is_retried_then_reported(monkeypatch, caplog):
    """Ray's fixed 30 s raylet wait can pass on a busy machine: retried, and the last failure raised."""
    import ray

    from genalign import ray_session

    calls = []

    def slow_start(**kwargs):
        calls.append(kwargs["_node_ip_address"])
        if len(calls) < 3:
            raise Exception("The current node timed out during startup. This could happen because ...")

    monkeypatch.setattr(ray, "init", slow_start)
    monkeypatch.setattr(ray, "shutdown", lambda: None)
    ray_session.init_ray(num_cpus=1)
    assert calls == ["127.0.0.1"] * 3
    assert "attempt 2 of 3" in caplog.text

    calls.clear()
    monkeypatch.setattr(
        ray,
        "init",
        lambda **kwargs: (
            calls.append(1) or (_ for _ in ()).throw(Exception("The current node timed out during startup."))
        ),
    )
    with pytest.raises(Exception, match="timed out during startup"):
        ray_session.init_ray(num_cpus=1)
    assert len(calls) == ray_session.START_ATTEMPTS

    monkeypatch.setattr(ray, "init", lambda **kwargs: (_ for _ in ()).throw(ValueError("bad option")))
    with pytest.raises(ValueError, match="bad option"):  # anything else is not retried
        ray_session.init_ray(num_cpus=1)
