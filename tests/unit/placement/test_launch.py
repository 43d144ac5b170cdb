"""`genalign train --nproc-per-node N`: the report of a failed rank and its resume command."""

from __future__ import annotations

from torch.distributed.elastic.multiprocessing.errors import ChildFailedError, ProcessFailure

from genalign.cli import main
from genalign.placement.launch import LAUNCHER_ENV, failure_report, rerun_instruction, resume_command


def test_resume_command_repeats_the_run_with_resume_auto_and_without_overwrite():
    command = resume_command(
        4,
        "experiment/toy/shapes_grpo",
        [
            "distributed.training.strategy=fsdp2",
            "trainer.overwrite=true",
            "trainer.resume_from=outputs/x/checkpoint-3",
            "trainer.output_dir=out dir",
        ],
    )
    assert command == (
        "genalign train --nproc-per-node=4 --config experiment/toy/shapes_grpo "
        "distributed.training.strategy=fsdp2 'trainer.output_dir=out dir' trainer.resume_from=auto"
    )


def test_the_resume_line_names_the_launch_command_of_the_ranks():
    """One process: the same command; ranks: the command that starts them again, rebuilt from
    a rank's arguments (torchrun's LOCAL_WORLD_SIZE tells one node from several)."""
    argv = [
        "/src/genalign/train.py",
        "--config",
        "experiment/toy/shapes_grpo",
        "distributed.training.strategy=ddp",
        "trainer.overwrite=true",
        "trainer.output_dir=out dir",
    ]
    assert rerun_instruction(1, argv, {}) == "rerun the same command with trainer.resume_from=auto"
    kept = (
        "--config experiment/toy/shapes_grpo distributed.training.strategy=ddp 'trainer.output_dir=out dir' "
        "trainer.resume_from=auto"
    )
    assert (
        rerun_instruction(2, argv, {"LOCAL_WORLD_SIZE": "2"})
        == f"run `torchrun --standalone --nproc-per-node=2 -m genalign.train {kept}`"
    )
    assert (
        rerun_instruction(8, argv, {"LOCAL_WORLD_SIZE": "4"})
        == f"rerun the same torchrun command on each of the 2 nodes with `-m genalign.train {kept}`"
    )
    assert (
        rerun_instruction(2, argv, {"LOCAL_WORLD_SIZE": "2", LAUNCHER_ENV: "2"})
        == f"run `genalign train --nproc-per-node=2 {kept}`"
    )


def test_the_report_names_the_first_failed_rank_and_how_it_failed(tmp_path):
    killed = ProcessFailure(local_rank=1, pid=4242, exitcode=-9, error_file=str(tmp_path / "none"))
    stopped = ProcessFailure(local_rank=0, pid=4241, exitcode=-15, error_file=str(tmp_path / "none"))
    stopped.timestamp = killed.timestamp + 1  # stopped by the agent after rank 1 died
    report = failure_report(
        ChildFailedError("genalign.train", {0: stopped, 1: killed}), 2, None, ["distributed.training.strategy=ddp"]
    )
    first, hint, command = report.splitlines()
    assert first.startswith("genalign: error: rank 1 (local rank 1, pid 4242) was killed by SIGKILL at ")
    assert hint.startswith("hint:")
    assert command.strip() == (
        "genalign train --nproc-per-node=2 distributed.training.strategy=ddp trainer.resume_from=auto"
    )
    crashed = ProcessFailure(local_rank=0, pid=7, exitcode=1, error_file=str(tmp_path / "none"))
    assert "rank 0 (local rank 0, pid 7) exited with code 1" in failure_report(
        ChildFailedError("genalign.train", {0: crashed}), 2, None, []
    )


def test_nproc_per_node_needs_a_distributed_strategy(tmp_path, capsys):
    code = main(
        [
            "train",
            "--nproc-per-node=2",
            "--config",
            "experiment/toy/shapes_grpo",
            f"trainer.output_dir={tmp_path / 'run'}",
        ]
    )
    assert code == 2
    assert (
        "--nproc-per-node=2 needs a positive count and distributed.training.strategy=ddp or fsdp2 (now 'none')"
        in capsys.readouterr().err
    )
