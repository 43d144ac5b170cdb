"""Session-wide test set-up: quiet, single-threaded, offline; one tiny SD3 pipeline on disk.

The environment defaults are set before torch/diffusers/ray are imported by any test module
(the machine is shared, nothing may be downloaded). `tiny_sd3_dir` builds the tiny pipeline
once per session and saves it with `save_pretrained`, so tests load it back through the real
diffusers path exactly as `model.path=<dir>` would.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
import time

for _name, _value in {
    "OMP_NUM_THREADS": "1",
    "HF_HUB_OFFLINE": "1",
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
    "GLOO_SOCKET_IFNAME": "lo",
}.items():
    os.environ.setdefault(_name, _value)

# torch.compile's on-disk cache, one per test session (and the processes it starts): inductor's
# default /tmp/torchinductor_<user> is shared by every process of the user, and another test run
# on the same box compiling the same graph was seen handing this one a half-written .so
# ("file too short")
if "TORCHINDUCTOR_CACHE_DIR" not in os.environ:
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="genalign-inductor-")
    atexit.register(shutil.rmtree, os.environ["TORCHINDUCTOR_CACHE_DIR"], ignore_errors=True)

import pytest  # noqa: E402
import torch  # noqa: E402

torch.set_num_threads(1)


def pytest_addoption(parser):
    parser.addoption(
        "--budget-s",
        type=float,
        default=None,
        help="skip, saying so, every test that would start after this many seconds of the session "
        "(CI's slow pass runs 'when time allows': .ci/run hands it what is left of its hour)",
    )


def pytest_sessionstart(session):
    session.config.genalign_started = time.monotonic()


def pytest_runtest_setup(item):
    budget = item.config.getoption("--budget-s")
    if budget is not None and time.monotonic() - item.config.genalign_started > budget:
        pytest.skip(f"the CI time budget (--budget-s {budget:.0f}) was spent before this test started")


@pytest.fixture(scope="session")
def tiny_sd3_dir(tmp_path_factory):
    """A tiny random StableDiffusion3Pipeline written by save_pretrained (seed 0); read-only."""
    from genalign.models.tiny_random import save_tiny_sd3

    return save_tiny_sd3(tmp_path_factory.mktemp("tiny_sd3") / "pipeline", seed=0)


def tiny_model_dir(family: str, description: str, leaf: str = "pipeline"):
    """A session fixture `tiny_<family>_dir`: the family's tiny random model (its spec's tiny_builder,
    seed 0) written by save_pretrained; read-only."""

    def fixture(tmp_path_factory):
        from genalign.models.tiny_random import save_tiny

        return save_tiny(family, tmp_path_factory.mktemp(f"tiny_{family}") / leaf, seed=0)

    fixture.__doc__ = f"{description} written by save_pretrained (seed 0); read-only."
    return pytest.fixture(scope="session", name=f"tiny_{family}_dir")(fixture)


tiny_wan_dir = tiny_model_dir("wan", "A tiny random WanPipeline")
tiny_flux_dir = tiny_model_dir("flux", "A tiny random FluxPipeline (FLUX.1-dev form: guidance embedding)")
tiny_flux_kontext_dir = tiny_model_dir("flux_kontext", "A tiny random FluxKontextPipeline")
tiny_qwen_image_dir = tiny_model_dir("qwen_image", "A tiny random QwenImagePipeline")
tiny_qwen_image_edit_dir = tiny_model_dir("qwen_image_edit", "A tiny random QwenImageEditPipeline")
tiny_qwen_image_edit_plus_dir = tiny_model_dir(
    "qwen_image_edit_plus", "A tiny random QwenImageEditPlusPipeline (Qwen-Image-Edit-2509's configs)"
)
tiny_cosmos_dir = tiny_model_dir("cosmos", "A tiny random Cosmos2_5_PredictBasePipeline")
tiny_flux2_klein_dir = tiny_model_dir("flux2_klein", "A tiny random Flux2KleinPipeline (klein 4B form, step-distilled)")
tiny_flux2_dir = tiny_model_dir("flux2", "A tiny random Flux2Pipeline (FLUX.2 [dev]: Mistral3, guidance embedding)")
tiny_janus_dir = tiny_model_dir("janus", "A tiny random JanusForConditionalGeneration + JanusProcessor", leaf="model")
tiny_hunyuan_video15_dir = tiny_model_dir("hunyuan_video15", "A tiny random HunyuanVideo15Pipeline")
tiny_hunyuan_video15_i2v_dir = tiny_model_dir("hunyuan_video15_i2v", "A tiny random HunyuanVideo15ImageToVideoPipeline")
tiny_z_image_dir = tiny_model_dir("z_image", "A tiny random ZImagePipeline (Z-Image-Turbo's form)")


@pytest.fixture(scope="session")
def tiny_wan22_dirs(tmp_path_factory) -> dict:
    """Tiny random Wan 2.2 pipelines from the published configs (seed 0), written by
    save_pretrained: {"a14b": two experts, "ti2v": TI2V-5B's form}; read-only."""
    from genalign.models.wan.tiny import build_tiny_wan22_a14b_pipeline, build_tiny_wan22_ti2v_pipeline

    root = tmp_path_factory.mktemp("tiny_wan22")
    build_tiny_wan22_a14b_pipeline(seed=0).save_pretrained(root / "a14b")
    build_tiny_wan22_ti2v_pipeline(seed=0).save_pretrained(root / "ti2v")
    return {"a14b": root / "a14b", "ti2v": root / "ti2v"}


@pytest.fixture(scope="session")
def tiny_wan_i2v_dirs(tmp_path_factory) -> dict:
    """Tiny random WanImageToVideoPipelines from the published configs (seed 0), written by
    save_pretrained: {"wan21": Wan 2.1 I2V (CLIP image encoder), "a14b": Wan 2.2 I2V-A14B's two
    experts, "flf2v": Wan 2.1 FLF2V (first and last frame)}; read-only."""
    from genalign.models.wan_i2v.tiny import (
        build_tiny_wan21_flf2v_pipeline,
        build_tiny_wan21_i2v_pipeline,
        build_tiny_wan22_i2v_a14b_pipeline,
    )

    root = tmp_path_factory.mktemp("tiny_wan_i2v")
    build_tiny_wan21_i2v_pipeline(seed=0).save_pretrained(root / "wan21")
    build_tiny_wan22_i2v_a14b_pipeline(seed=0).save_pretrained(root / "a14b")
    build_tiny_wan21_flf2v_pipeline(seed=0).save_pretrained(root / "flf2v")
    return {"wan21": root / "wan21", "a14b": root / "a14b", "flf2v": root / "flf2v"}


@pytest.fixture(scope="session")
def i2v_set(tmp_path_factory):
    """The shipped image-to-video prompt set rebuilt at 32x32 (the tiny video runs' size)."""
    from support import dataset_builder

    folder = tmp_path_factory.mktemp("i2v32")
    assert dataset_builder("i2v").main(["--out", str(folder), "--size", "32"]) == 0
    return folder


@pytest.fixture(scope="session")
def first_frame(i2v_set):
    """The 32x32 image-to-video set's first test picture, as the PIL image a pipeline takes."""
    from PIL import Image

    with Image.open(i2v_set / "images" / "test_00.png") as image:
        return image.convert("RGB")


@pytest.fixture(scope="session")
def edit_set(tmp_path_factory):
    """The shipped editing prompt set (genalign/datasets/edit) rebuilt at 64x64, the tiny editing
    runs' size, by its own build script; read-only."""
    from support import dataset_builder

    folder = tmp_path_factory.mktemp("edit64")
    assert dataset_builder("edit").main(["--out", str(folder), "--size", "64"]) == 0
    return folder
