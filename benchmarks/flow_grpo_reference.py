"""Flow-GRPO's own SD3.5 training loop beside genalign's recipe at the same settings: the GPU
suite's comparison (`benchmarks/gpu_suite.py`, section 2).

The reference is github.com/yifan123/flow_grpo's `scripts/train_sd3.py` with the modules it
imports (`flow_grpo/`: the SDE sampler `pipeline_with_logprob`, `sde_step_with_logprob`, the
prompt encoding, the rewards, the per-prompt statistics, the EMA) and `config/base.py`. It is
not part of genalign: `benchmarks/prepare_gpu.sh` copies those files, exactly as they are at
the commit it names, from a Flow-GRPO checkout into `.flow_grpo/` (ignored by git, carried to
the GPU machine). Its loop is its `main()`, run unchanged. Around it this harness sets only:

- the config: `config/base.py`'s `get_config()` with the choices `config/grpo.py`'s
  `general_ocr_sd3` makes (grpo.py itself imports `imp`, which Python 3.12 removed), at
  `Settings` (one place for both sides): resolution, steps, CFG, group size, batches, the KL
  and EMA; the reward is the reference's own `jpeg_compressibility` (no model to download);
- `StableDiffusion3Pipeline.from_pretrained`: the random-weight pipeline at SD3.5 Medium's
  shapes (`models/real_shapes.py`); the transformer in float32 as `from_pretrained` loads it,
  the rest cast by the loop itself;
- `wandb`: a stub module (nothing is logged);
- `eval`: the epoch clock. The loop calls it at the start of every epoch (eval_freq 1); it
  notes the time and ends the run after the epochs asked for (save_freq is past the run);
- the environment of `accelerate launch` with one process (LOCAL_RANK=0, WORLD_SIZE=1; `--cpu`
  on a CPU), with the transformer wrapped in DDP as in the reference's multi-GPU launches (the
  loop reads `transformer.module` for the KL reference; accelerate wraps a single GPU process
  only when told to, `OneOfSeveralProcesses`).

Mixed precision is the reference's default: fp16 autocast over the float32 transformer and
LoRA (bf16 compute over float32 LoRA masters on genalign's side, each at its own default).
"""

from __future__ import annotations

import contextlib
import os
import socket
import sys
import tempfile
import time
import types
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PREPARED = REPO / ".flow_grpo"
"""Where `benchmarks/prepare_gpu.sh` puts the reference files (and their `COMMIT`)."""
SD3_5_MEDIUM = "stabilityai/stable-diffusion-3.5-medium"


@dataclass(frozen=True)
class Settings:
    """One step (the reference's epoch) of both sides."""

    resolution: int = 512
    num_steps: int = 10
    guidance_scale: float = 4.5
    noise_level: float = 0.7
    prompts: int = 1
    """Prompt groups per step."""
    group: int = 8
    """Images per prompt."""
    chunk: int = 8
    """Images per sampling batch and per replay micro-batch."""
    timestep_fraction: float = 0.99
    """Trained share of the denoising steps: int(10 x 0.99) = 9."""
    kl_beta: float = 0.04
    ema: bool = True

    @property
    def images(self) -> int:
        return self.prompts * self.group


GPU = Settings()
"""The SD3.5 OCR recipe's settings (Flow-GRPO's general_ocr_sd3) with one prompt group of 8
images a step: the GPU suite's SD3.5 Medium item at its real shapes (the earlier H100 figures
in docs/benchmarks.md had 2 groups a step)."""
TINY = Settings(resolution=32, num_steps=4, prompts=2, group=2, chunk=2)
"""The same loop at the tiny SD3's shapes, for the CPU smoke test."""


def genalign_overrides(settings: Settings) -> list[str]:
    """genalign's SD3.5 OCR recipe at `settings` (model, device and output keys left to the caller)."""
    s = settings
    return [
        "/base/distributed=local",
        f"rollout.height={s.resolution}",
        f"rollout.width={s.resolution}",
        f"rollout.num_steps={s.num_steps}",
        f"rollout.guidance_scale={s.guidance_scale}",
        f"rollout.noise_level={s.noise_level}",
        f"rollout.n={s.group}",
        f"rollout.rollout_batch_size={s.prompts}",
        f"rollout.sample_batch_size={s.chunk}",  # the replay micro-batch too (actor.micro_batch_size unset)
        f"actor.gradient_accumulation_steps={max(1, s.images // s.chunk // 2)}",  # as the reference: 2 updates a step
        f"algorithm.timestep_fraction={s.timestep_fraction}",
        f"algorithm.kl_beta={s.kl_beta}",
        f"actor.ema.enabled={str(s.ema).lower()}",
        "reward.components.ocr=0.0",
        "reward.components.jpeg_compressibility=1.0",
        "reward.async_scoring=true",
    ]


def prepared_commit(prepared: Path = PREPARED) -> str | None:
    """The reference commit `prepare_gpu.sh` copied, or None when nothing is prepared."""
    marker = prepared / "COMMIT"
    return marker.read_text().strip() if marker.is_file() else None


def missing(prepared: Path = PREPARED) -> str | None:
    """Why the reference cannot run here, or None: its files (prepare_gpu.sh) and the two
    packages its config loading imports (carried as wheels; the device command installs them)."""
    import importlib.util

    if prepared_commit(prepared) is None:
        return f"the Flow-GRPO reference is not prepared: run `bash benchmarks/prepare_gpu.sh` ({prepared} is absent)"
    absent = [name for name in ("absl", "ml_collections") if importlib.util.find_spec(name) is None]
    if absent:
        return (
            f"the Flow-GRPO loop imports {', '.join(absent)}: install .whl/ (the device command in "
            "docs/benchmarks.md does)"
        )
    return None


class EpochClock:
    """Stands in for the loop's `eval`, which it calls at the start of every epoch."""

    class Done(Exception):
        """Raised at the start of the epoch after the last measured one."""

    def __init__(self, epochs: int, on_start=None):
        self.epochs, self.on_start = epochs, on_start
        self.marks: list[float] = []

    def __call__(self, *args, **kwargs) -> None:
        self.marks.append(time.perf_counter())
        if len(self.marks) == 2 and self.on_start is not None:
            self.on_start()  # the first epoch is warm-up: measure from the second
        if len(self.marks) > self.epochs:
            raise EpochClock.Done

    @property
    def seconds(self) -> list[float]:
        return [b - a for a, b in zip(self.marks, self.marks[1:])]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _reference_config(config, settings: Settings, dataset: Path, logdir: Path, mixed_precision: str) -> None:
    """`config/base.py`'s config (as the loop's flag loaded it) with `general_ocr_sd3`'s choices at `settings`."""
    s = settings
    config.pretrained.model = SD3_5_MEDIUM
    config.dataset, config.logdir, config.save_dir = str(dataset), str(logdir), str(logdir / "save")
    config.mixed_precision, config.use_lora, config.resolution = mixed_precision, True, s.resolution
    config.sample.num_steps, config.sample.guidance_scale = s.num_steps, s.guidance_scale
    config.sample.noise_level = s.noise_level
    config.sample.train_batch_size, config.sample.num_image_per_prompt = s.chunk, s.group
    config.sample.num_batches_per_epoch = s.images // s.chunk
    config.sample.test_batch_size, config.sample.global_std = 16, True
    config.train.batch_size, config.train.num_inner_epochs = s.chunk, 1
    config.train.gradient_accumulation_steps = max(1, config.sample.num_batches_per_epoch // 2)
    config.train.timestep_fraction, config.train.beta, config.train.ema = s.timestep_fraction, s.kl_beta, s.ema
    config.prompt_fn, config.reward_fn, config.per_prompt_stat_tracking = (
        "general_ocr",
        {"jpeg_compressibility": 1.0},
        True,
    )
    config.eval_freq, config.save_freq = 1, 10**9


def run_reference(
    settings: Settings, device: str, epochs: int = 3, prepared: Path = PREPARED, shapes: str = "real"
) -> dict:
    """Run the reference loop for `epochs` epochs (the first is warm-up) and return its figures:
    seconds of every measured epoch, images/s over them, peak GPU memory."""
    import torch
    from accelerate.utils import DistributedType

    from genalign.data.prompts import resolve_data_path
    from genalign.models.real_shapes import build_with_components, own_components, real_components
    from genalign.models.spec import family_spec

    if prepared_commit(prepared) is None:
        raise FileNotFoundError(f"{prepared}: the Flow-GRPO reference is not prepared (run benchmarks/prepare_gpu.sh)")
    cuda = device == "cuda"
    os.environ.update(
        {
            "LOCAL_RANK": "0",
            "RANK": "0",
            "WORLD_SIZE": "1",
            "LOCAL_WORLD_SIZE": "1",
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(_free_port()),
        }
    )
    if not cuda:  # `accelerate launch --cpu`: a one-process gloo DDP, as NCCL's on the GPU
        os.environ["ACCELERATE_USE_CPU"] = "true"
    sys.modules.setdefault("wandb", _wandb_stub())
    sys.path[:0] = [str(prepared), str(prepared / "scripts")]
    import train_sd3  # the reference's script, unchanged

    class OneOfSeveralProcesses(train_sd3.Accelerator):
        """accelerate wraps the trained model in DDP only when there is more than one process, but
        the reference's loop reaches through that wrapper (`transformer.module.disable_adapter()`
        for its KL term), as in its multi-GPU runs: the one process here is wrapped as one of
        those (on the CPU accelerate's one-process gloo group is wrapped already)."""

        @property
        def multi_device(self) -> bool:
            return self.distributed_type == DistributedType.MULTI_GPU or super().multi_device

    train_sd3.Accelerator = OneOfSeveralProcesses

    class RandomWeights:
        """`StableDiffusion3Pipeline.from_pretrained` at SD3.5 Medium's shapes, random weights."""

        @staticmethod
        def from_pretrained(name: str, **kwargs):
            components = (
                real_components("sd3", name) if shapes == "real" else own_components(family_spec("sd3").build_tiny(0))
            )
            pipeline = build_with_components("sd3", components, device, torch.float16 if cuda else torch.float32)
            pipeline.transformer.float()  # from_pretrained's float32; the loop casts the encoders itself
            return pipeline

    def measure_from_here() -> None:
        if cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()

    clock = EpochClock(epochs, measure_from_here)
    train_sd3.StableDiffusion3Pipeline, train_sd3.eval = RandomWeights, clock
    with tempfile.TemporaryDirectory() as tmp:
        dataset = Path(tmp) / "ocr"
        dataset.mkdir()
        for split in ("train", "test"):
            (dataset / f"{split}.txt").write_text(resolve_data_path(f"datasets/ocr/{split}.txt").read_text())
        train_sd3.FLAGS([sys.argv[0], f"--config={prepared / 'config' / 'base.py'}"])
        _reference_config(train_sd3.FLAGS.config, settings, dataset, Path(tmp), "fp16" if cuda else "no")
        start = time.perf_counter()
        with contextlib.suppress(EpochClock.Done):
            train_sd3.main(None)
    measured = clock.seconds[1:]
    if not measured:
        raise RuntimeError(f"the reference loop ran {len(clock.seconds)} epoch(s); at least 2 are needed")
    return {
        "epoch_s": clock.seconds,
        "images_per_epoch": settings.images,
        "images_per_s": settings.images * len(measured) / sum(measured),
        "peak_gib": torch.cuda.max_memory_allocated() / 2**30 if cuda else None,
        "load_s": (clock.marks[0] - start) if clock.marks else None,
        "commit": prepared_commit(prepared),
        "precision": "fp16 autocast over float32 weights" if cuda else "float32",
    }


def _wandb_stub() -> types.ModuleType:
    import importlib.machinery

    stub = types.ModuleType("wandb")
    stub.__spec__ = importlib.machinery.ModuleSpec("wandb", None)  # accelerate probes find_spec("wandb")
    stub.init = stub.log = lambda *args, **kwargs: None
    stub.Image = lambda *args, **kwargs: None
    return stub
