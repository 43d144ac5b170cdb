"""Under torchrun the ranks share each optimizer step's micro-batches: an accumulation that
does not split evenly among them is a one-line config error (raised before any model loads)."""

import pytest

from genalign.config.errors import ConfigError
from genalign.preflight.step_sizes import per_rank_accumulation


def test_each_rank_takes_its_share():
    assert per_rank_accumulation(4, 2) == 2
    assert per_rank_accumulation(3, 1) == 3


@pytest.mark.parametrize("steps, world, fit", [(1, 2, 2), (3, 2, 4), (4, 3, 6)])
def test_an_uneven_share_is_a_one_line_config_error(steps, world, fit):
    with pytest.raises(ConfigError) as excinfo:
        per_rank_accumulation(steps, world)
    message = str(excinfo.value)
    assert "\\n" not in message and f"actor.gradient_accumulation_steps={steps}" in message
    assert f"multiple of the {world} ranks" in message and f"set it to {fit}" in message


def test_the_trainer_checks_it_before_anything_loads(monkeypatch, tmp_path):
    """Under a bare torchrun launch (WORLD_SIZE=2 in the environment) Trainer(cfg) refuses
    before the process group or any model is set up."""
    from genalign.preflight.load import load_config
    from genalign.training import distributed
    from genalign.training.trainer import Trainer

    def no_group(*args, **kwargs):
        raise AssertionError("the process group was initialised before the check")

    monkeypatch.setattr(distributed, "init_distributed", no_group)
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("LOCAL_RANK", "0")
    cfg = load_config(
        None,
        [
            "distributed.training.strategy=ddp",
            "actor.gradient_accumulation_steps=1",
            f"trainer.output_dir={tmp_path / 'run'}",
        ],
    )
    with pytest.raises(ConfigError, match="multiple of the 2 ranks"):
        Trainer(cfg)
