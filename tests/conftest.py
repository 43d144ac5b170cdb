"""Session-wide test set-up: quiet, single-threaded, offline; one tiny SD3 pipeline on disk.

The environment defaults are set before torch/diffusers/ray are imported by any test module
(the machine is shared, nothing may be downloaded). `tiny_sd3_dir` builds the tiny pipeline
once per session and saves it with `save_pretrained`, so tests load it back through the real
diffusers path exactly as `model.path=<dir>` would.
"""

from __future__ import annotations

import os

for _name, _value in {"OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
                      "GLOO_SOCKET_IFNAME": "lo"}.items():
    os.environ.setdefault(_name, _value)

import pytest  # noqa: E402
import torch  # noqa: E402

torch.set_num_threads(1)


@pytest.fixture(scope="session")
def tiny_sd3_dir(tmp_path_factory):
    """A tiny random StableDiffusion3Pipeline written by save_pretrained (seed 0); read-only."""
    from genalign.models.tiny import save_tiny_sd3

    return save_tiny_sd3(tmp_path_factory.mktemp("tiny_sd3") / "pipeline", seed=0)


@pytest.fixture(scope="session")
def tiny_wan_dir(tmp_path_factory):
    """A tiny random WanPipeline written by save_pretrained (seed 0); read-only."""
    from genalign.models.tiny import save_tiny

    return save_tiny("wan", tmp_path_factory.mktemp("tiny_wan") / "pipeline", seed=0)


@pytest.fixture(scope="session")
def tiny_flux_dir(tmp_path_factory):
    """A tiny random FluxPipeline (FLUX.1-dev form: guidance embedding) written by save_pretrained; read-only."""
    from genalign.models.tiny import save_tiny

    return save_tiny("flux", tmp_path_factory.mktemp("tiny_flux") / "pipeline", seed=0)


@pytest.fixture(scope="session")
def tiny_qwen_image_dir(tmp_path_factory):
    """A tiny random QwenImagePipeline written by save_pretrained; read-only."""
    from genalign.models.tiny import save_tiny

    return save_tiny("qwen_image", tmp_path_factory.mktemp("tiny_qwen_image") / "pipeline", seed=0)


@pytest.fixture(scope="session")
def tiny_cosmos_dir(tmp_path_factory):
    """A tiny random Cosmos2_5_PredictBasePipeline written by save_pretrained (seed 0); read-only."""
    from genalign.models.tiny import save_tiny

    return save_tiny("cosmos", tmp_path_factory.mktemp("tiny_cosmos") / "pipeline", seed=0)


@pytest.fixture(scope="session")
def tiny_janus_dir(tmp_path_factory):
    """A tiny random JanusForConditionalGeneration + JanusProcessor written by save_pretrained; read-only."""
    from genalign.models.tiny import save_tiny

    return save_tiny("janus", tmp_path_factory.mktemp("tiny_janus") / "model", seed=0)
