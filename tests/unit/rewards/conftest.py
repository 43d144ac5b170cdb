from pathlib import Path

import pytest
import torch

FAKES_DIR = str(Path(__file__).parent)


@pytest.fixture
def fakes_on_path(monkeypatch):
    """Make `reward_fakes` importable for dotted-path scorer names."""
    monkeypatch.syspath_prepend(FAKES_DIR)
    return FAKES_DIR


@pytest.fixture
def images():
    """Six 16x16 uint8 images, image i filled with 40*i."""
    return (torch.arange(6, dtype=torch.uint8) * 40).view(6, 1, 1, 1).expand(6, 3, 16, 16).contiguous()


@pytest.fixture
def start_reward_server(fakes_on_path):
    """start_reward_server({name: scorer kwargs}, token, batch_size, **ServeOptions fields) -> a
    `genalign serve-reward` service on loopback in this process (stopped after the test)."""
    from genalign.rewards.config import RewardConfig
    from genalign.rewards.scores import build_scorer
    from genalign.rewards.server import BackgroundServer, RewardService, ServeOptions

    servers = []

    def start(scorers: dict, token: str, batch_size: int, **options):
        allowed = [name for name in scorers if ":" in name]
        cfg = RewardConfig(
            components=dict.fromkeys(scorers, 1.0),
            kwargs={k: v for k, v in scorers.items() if v},
            allow_import=allowed,
            batch_size=batch_size,
        )
        built = {name: build_scorer(name, "cpu", dict(kwargs), allowed) for name, kwargs in scorers.items()}
        servers.append(BackgroundServer(RewardService(built, cfg, token, ServeOptions(**options)).app()))
        return servers[-1]

    yield start
    for server in servers:
        server.stop()
