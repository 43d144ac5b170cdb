"""The real trainer under torchrun on CPU (gloo): 2 ranks equal 1 process, and resume works.

Each rank rolls out its own prompt groups, rewards are gathered so advantages see whole
groups and the global std, gradients are averaged (DDP: composable replicate; FSDP2:
fully_shard), and rank 0 alone writes. With one optimizer step per training step the 2-rank
update equals the 1-process update over the same global batch (to fp32 reduction order): the
gradients to the reorder bound, the weights to the bound that follows AdamW's step from it.

The weights are compared after the first step: from the second step on, the rollouts are
decoded to uint8 and scored by JPEG size, so an fp32 reduction-order difference of 1e-7 in
the weights can flip a pixel, change a JPEG by a byte and move an advantage — a real
difference in the data, not in the distributed update.
"""

from __future__ import annotations

import csv
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from support import TINY_DEPTH, TINY_REDUCTION, assert_same_first_adamw_step, trained_parameter_names

pytestmark = pytest.mark.distributed

RECIPE = "experiment/diffusion/sd3_5/online_grpo_ocr"


def overrides(model_dir: Path, out: Path, strategy: str, *extra: str) -> list[str]:
    return [
        f"model.path={model_dir}",
        "model.device=cpu",
        "model.dtype=float32",
        "model.lora.rank=4",
        "model.lora.alpha=8",
        "/base/distributed=local",
        f"distributed.training.strategy={strategy}",
        "distributed.training.backend=gloo",
        "rollout.height=64",
        "rollout.width=64",
        "rollout.num_steps=3",
        "rollout.n=2",
        "rollout.rollout_batch_size=2",
        "rollout.sample_batch_size=2",
        "actor.gradient_accumulation_steps=2",
        "actor.lr=1e-2",
        "actor.ema.update_every=1",
        "reward.components.ocr=0.0",
        "reward.components.jpeg_compressibility=1.0",
        "eval.num_steps=2",
        "eval.max_prompts=2",
        "eval.batch_size=2",
        "eval.every=0",
        "trainer.num_steps=2",
        "trainer.save_every=1",
        "trainer.progress_bar=false",
        f"trainer.output_dir={out}",
        *extra,
    ]


TESTS = Path(__file__).resolve().parents[1]  # `support` (the test scorers) is importable by the ranks


def launch(nproc: int, args: list[str], recipe: str = RECIPE) -> None:
    env = {
        **os.environ,
        "GLOO_SOCKET_IFNAME": "lo",
        "OMP_NUM_THREADS": "1",
        "HF_HUB_OFFLINE": "1",
        "MASTER_ADDR": "127.0.0.1",
        "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]),
    }
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc_per_node={nproc}",
        "-m",
        "genalign.train",
        "--config",
        recipe,
        *args,
    ]
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-4000:]


def weights(run: Path, name: str = "checkpoint-final") -> dict[str, torch.Tensor]:
    return load_file(str(run / name / "trainable.safetensors"))


@pytest.fixture(scope="module")
def single_process(tiny_sd3_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("single")
    launch(1, overrides(tiny_sd3_dir, out, "ddp"))
    return out


@pytest.mark.parametrize(
    "strategy",
    # DDP's 2-rank = 1-process update is the default suite's on the toy (test_distributed_training.py)
    [pytest.param("ddp", marks=pytest.mark.slow), "fsdp2"],
)
def test_two_ranks_reach_the_one_process_weights(single_process, tiny_sd3_dir, tmp_path, strategy):
    out = tmp_path / strategy
    launch(2, overrides(tiny_sd3_dir, out, strategy))
    one, two = weights(single_process, "checkpoint-1"), weights(out, "checkpoint-1")
    assert sorted(one) == sorted(two) and all("lora" in k for k in one)
    # lora_B starts at zero: the first step must have moved it
    assert any(v.abs().max() > 0 for k, v in one.items() if "lora_B" in k), "the first step did not move the adapter"
    # 2 ranks only regroup the gradient sums (all-reduce of two halves): the gradients agree to
    # the reorder bound through forward and backward, the weights to the bound that follows the
    # AdamW step from it (support.py: a gradient near zero is where Adam amplifies rounding)
    names = trained_parameter_names(RECIPE, overrides(tiny_sd3_dir, tmp_path / "names", strategy))
    assert_same_first_adamw_step(
        out / "checkpoint-1", single_process / "checkpoint-1", names, length=TINY_REDUCTION, depth=2 * TINY_DEPTH
    )
    # rank 0 alone wrote the run directory, with the same rows as the 1-process run
    rows = list(csv.DictReader(open(out / "metrics.csv")))
    assert [r["step"] for r in rows] == ["1", "2"]
    reference = list(csv.DictReader(open(single_process / "metrics.csv")))
    for key in ("reward_mean", "reward_std", "adv_abs_mean", "zero_std_ratio"):  # whole-step statistics
        assert rows[0][key] == reference[0][key], key
    assert (out / "checkpoint-final" / "lora" / "pytorch_lora_weights.safetensors").exists()


def test_two_rank_resume_continues_the_run(tiny_sd3_dir, tmp_path):
    first = tmp_path / "first"
    launch(2, overrides(tiny_sd3_dir, first, "ddp", "trainer.loggers=[csv,tensorboard]"))
    # rank 0 alone writes the trackers and train.log
    assert len(list((first / "tensorboard").glob("events.out.tfevents.*"))) == 1
    assert (first / "train.log").read_text().count("step sizes:") == 1
    resumed = tmp_path / "resumed"
    launch(2, overrides(tiny_sd3_dir, resumed, "ddp", f"trainer.resume_from={first / 'checkpoint-1'}"))
    a, b = weights(first), weights(resumed)
    assert all(torch.equal(a[k], b[k]) for k in a)


JANUS_RECIPE = "experiment/autoregressive/janus_pro/online_grpo_ocr"


def janus_overrides(model_dir: Path, out: Path, strategy: str, train_mode: str = "full") -> list[str]:
    """A full fine-tune of the tiny Janus language model: its input embeddings are looked up
    apart from the decoder layers (Janus mixes text and image-token embeddings), so this checks
    that DDP / FSDP2 still average every trained parameter's gradient, the embedding table
    included."""
    return [
        f"model.path={model_dir}",
        "model.device=cpu",
        "model.dtype=float32",
        f"model.train_mode={train_mode}",
        "/base/distributed=local",
        f"distributed.training.strategy={strategy}",
        "distributed.training.backend=gloo",
        "rollout.height=32",
        "rollout.width=32",
        "rollout.n=2",
        "rollout.rollout_batch_size=2",
        "rollout.sample_batch_size=2",
        "actor.gradient_accumulation_steps=2",
        "actor.lr=1e-3",
        "reward.components.ocr=0.0",
        "reward.components.jpeg_compressibility=1.0",
        "eval.every=0",
        "trainer.num_steps=1",
        "trainer.save_every=1",
        "trainer.progress_bar=false",
        f"trainer.output_dir={out}",
    ]


@pytest.fixture(scope="module")
def janus_single_process(tiny_janus_dir, tmp_path_factory):
    """The one-process Janus run of a train mode (launched once per mode, on first use)."""
    runs: dict[str, Path] = {}

    def run(train_mode: str) -> Path:
        if train_mode not in runs:
            runs[train_mode] = tmp_path_factory.mktemp(f"janus_single_{train_mode}")
            launch(1, janus_overrides(tiny_janus_dir, runs[train_mode], "ddp", train_mode), JANUS_RECIPE)
        return runs[train_mode]

    return run


@pytest.mark.parametrize(
    "strategy,train_mode",
    [  # the default suite keeps FSDP2 training the sharded table; the rest of the matrix is slow
        pytest.param("ddp", "full", marks=pytest.mark.slow),
        ("fsdp2", "full"),
        pytest.param("fsdp2", "lora", marks=pytest.mark.slow),
    ],
)
def test_janus_two_ranks_reach_the_one_process_weights(
    janus_single_process, tiny_janus_dir, tmp_path, strategy, train_mode
):
    """FSDP2 as the trainer applies it (`distributed.wrap_for_training`): one unit per LLaMA
    decoder layer, the root for the rest, the embedding table included. Janus' prompt
    embeddings are looked up inside the language model's call (`models/janus.py:
    embed_prompt_ids`), after FSDP2 has gathered the table; looked up before it, the table was
    a shard and the run failed. LoRA is the recipe's mode; full also trains the table."""
    launch(2, janus_overrides(tiny_janus_dir, tmp_path / "two", strategy, train_mode), JANUS_RECIPE)
    one, two = weights(janus_single_process(train_mode)), weights(tmp_path / "two")
    assert sorted(one) == sorted(two)
    if train_mode == "full":
        [embedding] = [k for k in one if k.endswith("embed_tokens.weight")]  # trained in a full fine-tune
        base = load_file(str(tiny_janus_dir / "model.safetensors"))
        [initial] = [v for k, v in base.items() if k.endswith("language_model.embed_tokens.weight")]
        assert not torch.equal(one[embedding], initial), "the step did not move the embedding table"
    else:
        assert all("lora" in k for k in one)
        assert any(v.abs().max() > 0 for k, v in one.items() if "lora_B" in k), "the step did not move the adapter"
    # as above: gradients to the reorder bound, weights to the bound that follows the AdamW step
    names = trained_parameter_names(
        JANUS_RECIPE, janus_overrides(tiny_janus_dir, tmp_path / "names", strategy, train_mode)
    )
    assert_same_first_adamw_step(
        tmp_path / "two" / "checkpoint-final",
        janus_single_process(train_mode) / "checkpoint-final",
        names,
        length=TINY_REDUCTION,
        depth=2 * TINY_DEPTH,
    )


# ---------------------------------------------------------------- asymmetric data, every algorithm
RANK_ONE_CONSTANT = [
    "reward.allow_import=[support:RankOneConstantReward]",
    "reward.components.toy_shape=0.0",
    "reward.components={support:RankOneConstantReward: 1.0}",
]
SLOW = pytest.mark.slow
"""The rest of the algorithm x strategy matrix, in the slow pass. The default suite keeps one idle
rank per kind of update the trainer drives: a policy-gradient replay (grpo), a forward-process
loss (nft), a group-weighted one with a whole-batch prepare_update (dgpo) and a supervised one
(sft); DPO's pairs, AWM's strata and Flow-DPPO's KL mask reach the same filler replay."""
DGPO_SHORT = [  # 2 σ's of the 4-step schedule, zero-advantage samples dropped (rank 1 idle)
    "algorithm.dgpo.num_timesteps=2",
    "algorithm.dgpo.max_timestep_index=3",
    "algorithm.drop_zero_advantage=true",
]
ASYMMETRIC = {
    # rank 1's groups score constantly: no sample with a non-zero advantage (drop_zero_advantage)
    "grpo-ddp": ("experiment/toy/shapes_grpo", "ddp", RANK_ONE_CONSTANT),
    "grpo-fsdp2": ("experiment/toy/shapes_grpo", "fsdp2", RANK_ONE_CONSTANT, SLOW),
    # rank 1 has no DPO pair (rank 0 one micro-batch of 2): it replays a filler pair with weight 0
    "dpo_online-fsdp2": (
        "experiment/toy/shapes_dpo",
        "fsdp2",
        [*RANK_ONE_CONSTANT, "rollout.rollout_batch_size=4"],
        SLOW,
    ),
    "dpo_online-ddp": ("experiment/toy/shapes_dpo", "ddp", [*RANK_ONE_CONSTANT, "rollout.rollout_batch_size=4"], SLOW),
    "nft-fsdp2": ("experiment/toy/shapes_nft", "fsdp2", RANK_ONE_CONSTANT),
    # DGPO: rank 1 has no trainable sample (its advantages are 0 and dropped), yet its group
    # weights' forwards (prepare_update, whole batch) and its filler replay pair with rank 0's
    "dgpo-fsdp2": ("experiment/toy/shapes_dgpo", "fsdp2", [*RANK_ONE_CONSTANT, *DGPO_SHORT]),
    "dgpo-ddp": ("experiment/toy/shapes_dgpo", "ddp", [*RANK_ONE_CONSTANT, *DGPO_SHORT], SLOW),
    # AWM keeps zero-advantage samples by default; dropping them leaves rank 1 idle: it replays
    # a filler sample with weight 0 through all 6 strata, entering every collective
    "awm-ddp": ("experiment/toy/shapes_awm", "ddp", [*RANK_ONE_CONSTANT, "algorithm.drop_zero_advantage=true"], SLOW),
    # Flow-DPPO keeps zero-advantage samples by default (as UniRL): with the filter on, rank 1
    # has nothing to train and replays a filler; a window of 2 fits the 4-step rollout
    "flow_dppo-ddp": (
        "experiment/toy/shapes_flow_dppo",
        "ddp",
        [*RANK_ONE_CONSTANT, "algorithm.drop_zero_advantage=true", "rollout.sde_window.size=2"],
        SLOW,
    ),
    # offline pairs split evenly (the config refuses a split with a partial micro-batch)
    "dpo_offline-ddp": ("experiment/toy/offline_dpo", "ddp", ["rollout.rollout_batch_size=4", "rollout.n=1"], SLOW),
    # flow-matching SFT, best of N with tied groups dropped: rank 1's groups all tie, so it keeps
    # no sample and replays a filler with weight 0
    "sft_best_of_n-ddp": (
        "experiment/toy/shapes_sft",
        "ddp",
        [
            *RANK_ONE_CONSTANT,
            "algorithm.sft.source=best_of_n",
            "algorithm.sft.tied_groups=drop",
            "data.image_manifest=null",
        ],
    ),
    # SFT from the image dataset: rows split evenly over the ranks
    "sft_dataset-fsdp2": ("experiment/toy/shapes_sft", "fsdp2", ["rollout.rollout_batch_size=4", "rollout.n=1"], SLOW),
}


def toy_overrides(out: Path, strategy: str, *extra: str) -> list[str]:
    return [
        "/base/distributed=local",
        f"distributed.training.strategy={strategy}",
        "distributed.training.backend=gloo",
        "distributed.training.timeout_s=120",
        "rollout.num_steps=4",
        "rollout.n=2",
        "rollout.rollout_batch_size=2",
        "rollout.sample_batch_size=2",
        "actor.gradient_accumulation_steps=2",
        "eval.every=0",
        "eval.max_prompts=2",
        "eval.samples_per_prompt=2",
        "eval.batch_size=4",
        "eval.num_steps=2",
        "trainer.num_steps=2",
        "trainer.save_every=0",
        "trainer.progress_bar=false",
        f"trainer.output_dir={out}",
        *extra,
    ]


def check_asymmetric_run(out: Path, extra: list[str]) -> None:
    """The run finished both steps and wrote its checkpoint; with the rank-1 constant scorer,
    exactly rank 1's half of the groups had constant rewards (the asymmetry happened)."""
    rows = list(csv.DictReader(open(out / "metrics.csv")))
    assert [r["step"] for r in rows] == ["1", "2"]
    assert all(float(r["optimizer_steps"]) >= 1 for r in rows)
    if RANK_ONE_CONSTANT[0] in extra:
        assert [float(r["zero_std_ratio"]) for r in rows] == [0.5, 0.5]
    assert (out / "checkpoint-final" / "trainable.safetensors").exists()


@pytest.mark.parametrize("case", [pytest.param(name, marks=spec[3:]) for name, spec in sorted(ASYMMETRIC.items())])
def test_asymmetric_data_completes_on_two_ranks(tmp_path, case):
    """Each asymmetry the data can force, per algorithm and strategy: the 2-rank run finishes
    (a rank skipping a collective would leave the other waiting until the timeout)."""
    recipe, strategy, extra = ASYMMETRIC[case][:3]
    launch(2, toy_overrides(tmp_path, strategy, *extra), recipe)
    check_asymmetric_run(tmp_path, extra)


def test_ar_grpo_with_a_rank_of_constant_rewards_completes(tiny_janus_dir, tmp_path):
    """AR-GRPO (Janus) with drop_zero_advantage: rank 1 has no trainable sample."""
    extra = [
        *RANK_ONE_CONSTANT[:1],
        "reward.components.jpeg_compressibility=0.0",
        RANK_ONE_CONSTANT[2],
        "algorithm.drop_zero_advantage=true",
        "trainer.num_steps=2",
        "eval.every=0",
    ]
    launch(2, [*janus_overrides(tiny_janus_dir, tmp_path, "ddp"), *extra], JANUS_RECIPE)
    check_asymmetric_run(tmp_path, [RANK_ONE_CONSTANT[0]])


# ---------------------------------------------------------------- a rank killed mid-step
def rank_pid(agent_pid: int, rank: int) -> int | None:
    """The pid of torchrun rank `rank` among the agent's children (read from /proc)."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            environ = (entry / "environ").read_bytes().split(b"\0")
        except (OSError, IndexError, ValueError):
            continue  # exited meanwhile, or not ours to read
        if parent == agent_pid and f"RANK={rank}".encode() in environ:
            return int(entry.name)
    return None


def test_a_killed_rank_ends_the_job_with_its_name_and_the_resume_command(tmp_path):
    """`genalign train --nproc-per-node 2`: rank 1 is killed with SIGKILL during a step; the
    job exits non-zero within a bound (torchrun's agent stops rank 0), the message names rank
    1 and gives the command with trainer.resume_from=auto, and that resume continues the run."""
    import signal
    import time

    env = {
        **os.environ,
        "GLOO_SOCKET_IFNAME": "lo",
        "OMP_NUM_THREADS": "1",
        "HF_HUB_OFFLINE": "1",
        "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]),
    }
    recipe = "experiment/toy/shapes_grpo"

    def command(*extra: str) -> list[str]:
        return [
            sys.executable,
            "-m",
            "genalign",
            "train",
            "--nproc-per-node=2",
            "--config",
            recipe,
            *toy_overrides(tmp_path, "ddp", "trainer.save_every=1", *extra),
        ]

    job = subprocess.Popen(
        command("trainer.num_steps=200"), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        deadline = time.monotonic() + 240
        while not (tmp_path / "checkpoint-1").exists():  # step 1 done: the ranks are in a later step
            assert job.poll() is None and time.monotonic() < deadline, "the job ended or stalled before step 1"
            time.sleep(0.2)
        pid = rank_pid(job.pid, 1)
        assert pid is not None, "rank 1 not found among the agent's children"
        os.kill(pid, signal.SIGKILL)
        killed = time.monotonic()
        _, stderr = job.communicate(timeout=120)
        elapsed = time.monotonic() - killed
    finally:
        if job.poll() is None:
            job.kill()
            job.wait()
    assert job.returncode != 0
    assert elapsed < 60, f"the job took {elapsed:.0f} s to end after rank 1 died"
    assert f"rank 1 (local rank 1, pid {pid}) was killed by SIGKILL" in stderr, stderr[-3000:]
    assert "trainer.resume_from=auto" in stderr and "genalign train --nproc-per-node=2" in stderr

    steps = sorted(int(p.name.split("-")[1]) for p in tmp_path.glob("checkpoint-[0-9]*") if p.is_dir())
    newest = steps[-1]
    resumed = subprocess.run(
        command(f"trainer.num_steps={newest + 1}", "trainer.resume_from=auto"),
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    rows = list(csv.DictReader(open(tmp_path / "metrics.csv")))
    assert rows[-1]["step"] == str(newest + 1)
    assert (tmp_path / "checkpoint-final" / "trainable.safetensors").exists()
    assert (
        f"resumed from {tmp_path / f'checkpoint-{newest}'} at step {newest + 1}" in (tmp_path / "train.log").read_text()
    )


WAN22_A14B = "experiment/diffusion/wan_2_2/online_grpo_pickscore"


@pytest.mark.parametrize("strategy", ["ddp", pytest.param("fsdp2", marks=pytest.mark.slow)])
def test_wan22_experts_train_on_two_ranks_whose_samples_use_different_experts(tiny_wan22_dirs, tmp_path, strategy):
    """Wan 2.2 A14B's two experts on 2 ranks, one trained step a sample drawn from the three (the
    recipe's window): a rank's backward may run the other expert than its peer's. The run
    finishes both steps at replay parity 0 and exports both experts. DDP's hooks, readied by each
    expert's forward, hung here (the experts' gradients are averaged after the step's last
    backward instead); FSDP2's experts run in lockstep (test_distributed_experts.py), the run
    resumes from its sharded checkpoint, and a rank with nothing to train takes part."""
    from support import tiny_video_overrides

    window = ["rollout.sde_window.lo=0", "rollout.sde_window.hi=3", "rollout.sde_window.size=1"]
    distributed = [
        "/base/distributed=local",
        f"distributed.training.strategy={strategy}",
        "distributed.training.backend=gloo",
    ]
    extra = [*window, *distributed, "distributed.training.timeout_s=120", "eval.every=0"]
    args = [*tiny_video_overrides(tiny_wan22_dirs["a14b"], tmp_path, *extra), "actor.gradient_accumulation_steps=2"]
    launch(2, args, WAN22_A14B)
    rows = list(csv.DictReader(open(tmp_path / "metrics.csv")))
    assert [r["step"] for r in rows] == ["1", "2"]
    assert float(rows[0]["parity_max_abs_log_prob_diff"]) == 0.0
    assert (tmp_path / "checkpoint-final" / "lora" / "transformer_2").is_dir()
    if strategy == "fsdp2":  # the sharded optimizer state and both experts' adapters reload
        launch(2, [*args, "trainer.num_steps=3", "trainer.resume_from=auto"], WAN22_A14B)
        assert [r["step"] for r in csv.DictReader(open(tmp_path / "metrics.csv"))] == ["1", "2", "3"]
        # rank 1's groups score constantly: it has nothing to train and replays a filler sample
        # beside rank 0's, whatever experts each uses
        idle = [
            "reward.components.temporal_consistency=0.0",
            "reward.components.jpeg_compressibility=0.0",
            "reward.allow_import=[support:RankOneConstantReward]",
            "reward.components={support:RankOneConstantReward: 1.0}",
            "algorithm.drop_zero_advantage=true",
        ]
        out = tmp_path / "idle"
        idle_args = [*tiny_video_overrides(tiny_wan22_dirs["a14b"], out, *extra, *idle)]
        launch(2, [*idle_args, "actor.gradient_accumulation_steps=2"], WAN22_A14B)
        rows = list(csv.DictReader(open(out / "metrics.csv")))
        assert [r["step"] for r in rows] == ["1", "2"]
        assert [float(r["zero_std_ratio"]) for r in rows] == [0.5, 0.5]
