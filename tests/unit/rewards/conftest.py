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
