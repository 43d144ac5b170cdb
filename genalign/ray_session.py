"""Starting a private local Ray instance, bound to loopback: the one place genalign calls
`ray.init` to start Ray (the Ray reward runtime and the Ray rollout engine both come here).

Why: Ray runs whatever a client sends it (cloudpickle, job submission), so every port of a
local instance — GCS, raylet, object manager, workers, dashboard and runtime-env agents —
must be unreachable from other machines. Ray 2.x treats `_node_ip_address="127.0.0.1"` as
"resolve me to the routable address" (`services.resolve_ip_for_localhost`) unless its
single-node mode is on (`RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`, read into
`ray_constants.ENABLE_RAY_CLUSTER`); with that mode and a loopback node IP, every Ray process
binds 127.0.0.1 (checked by `tests/unit/test_ray_session.py` on the listening sockets).

Joining a cluster is never implicit: callers pass `address` only when the user pointed at one
(`$RAY_ADDRESS` / the cross-node preset), and then nothing here changes how Ray binds.
`$GENALIGN_RAY_NODE_IP` (default 127.0.0.1) sets the address a local instance binds to, for
the rare case where other machines must reach it.
"""

from __future__ import annotations

import ipaddress
import logging
import os
from typing import Any

log = logging.getLogger(__name__)

NODE_IP_ENV = "GENALIGN_RAY_NODE_IP"
SINGLE_NODE_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"


def local_node_ip() -> str:
    """The address a local Ray instance binds to: $GENALIGN_RAY_NODE_IP or 127.0.0.1."""
    value = os.environ.get(NODE_IP_ENV, "").strip() or "127.0.0.1"
    try:
        ipaddress.ip_address(value)
    except ValueError as exc:
        raise ValueError(f"{NODE_IP_ENV}={value!r} is not an IP address; unset it to keep Ray on 127.0.0.1") from exc
    return value


def init_ray(address: str | None = None, **options: Any) -> None:
    """`ray.init` for genalign: join `address` when given, else start a private local instance
    on `local_node_ip()` with the dashboard off. `options` go to `ray.init` (num_cpus, ...)."""
    import ray

    options.setdefault("include_dashboard", False)
    if address:
        log.info("ray: joining the cluster at %s", address)
        ray.init(address=address, **options)
        return
    node_ip = local_node_ip()
    if not ipaddress.ip_address(node_ip).is_loopback:
        log.warning(
            "ray: %s=%s: the local Ray instance listens on that address, reachable from other machines",
            NODE_IP_ENV,
            node_ip,
        )
        _start_local(node_ip, options)
        return
    from ray._private import ray_constants

    # see the module docstring: without single-node mode Ray swaps loopback for the routable IP
    previous_env, previous_flag = os.environ.get(SINGLE_NODE_ENV), ray_constants.ENABLE_RAY_CLUSTER
    os.environ[SINGLE_NODE_ENV] = "0"
    ray_constants.ENABLE_RAY_CLUSTER = False
    try:
        # address="local" starts a fresh instance instead of attaching to whatever cluster a
        # stale /tmp/ray/ray_current_cluster points at
        _start_local(node_ip, options)
    finally:
        ray_constants.ENABLE_RAY_CLUSTER = previous_flag
        if previous_env is None:
            os.environ.pop(SINGLE_NODE_ENV, None)
        else:
            os.environ[SINGLE_NODE_ENV] = previous_env
    log.info("ray: started a local instance on %s", node_ip)


START_ATTEMPTS = 3
"""Ray waits a fixed 30 s for its raylet to register (node.py, not configurable); on a
machine busy with other work that can pass, so a local start is tried this many times."""


def _start_local(node_ip: str, options: dict[str, Any]) -> None:
    import ray

    for attempt in range(1, START_ATTEMPTS + 1):
        try:
            ray.init(address="local", _node_ip_address=node_ip, **options)
            return
        except Exception as exc:  # Ray raises a bare Exception for a startup timeout
            if "timed out during startup" not in str(exc) or attempt == START_ATTEMPTS:
                raise
            log.warning(
                "ray: the local instance did not start within Ray's 30 s (attempt %d of %d: %s); retrying",
                attempt,
                START_ATTEMPTS,
                exc,
            )
            ray.shutdown()
