"""`preflight/cautions.py`: valid settings worth a warning, each one line naming the key."""

from genalign.preflight.cautions import config_cautions
from genalign.preflight.load import load_config


def test_the_default_recipe_has_no_caution():
    assert config_cautions(load_config(None)) == []


def test_each_caution_names_its_key(tmp_path):
    (tmp_path / "one.txt").write_text("a red circle\n")
    cfg = load_config(
        None,
        [
            "reward.components.toy_shape=-0.5",
            "eval.gold_rewards.toy_shape_judge=-1",
            "reward.components.ocr=1",
            f"data.manifest={tmp_path / 'one.txt'}",
        ],
    )
    cautions = config_cautions(cfg)
    assert [c.split(" ")[0] for c in cautions] == [
        "reward.components.toy_shape=-0.5",
        "eval.gold_rewards.toy_shape_judge=-1",
        "reward.components.ocr",
        "data.manifest",
    ]


def test_ray_gpu_counts_on_a_machine_without_gpus(monkeypatch):
    from genalign.placement import resources

    cfg = load_config(None, ["rollout.engine=ray", "/base/distributed=ray_rollout"])
    monkeypatch.setattr(resources, "environment_facts", lambda: resources.EnvironmentFacts((), None))
    (caution,) = config_cautions(cfg)
    assert caution.startswith(
        "distributed.resources.trainer.num_gpus=1, distributed.resources.rollout.num_gpus=auto, but no GPU is visible"
    )
    monkeypatch.setattr(resources, "environment_facts", lambda: resources.EnvironmentFacts((0, 1), None))
    assert config_cautions(cfg) == []


def test_a_group_of_one_trains_nothing_when_advantages_are_per_group():
    cfg = load_config(None, ["rollout.n=1", "rollout.sample_batch_size=8"])
    (caution,) = config_cautions(cfg)
    assert caution.startswith("rollout.n=1 with algorithm.advantage.per_prompt=true")
    # normalised over the whole batch, a group of one is a real setting
    assert (
        config_cautions(
            load_config(None, ["rollout.n=1", "rollout.sample_batch_size=8", "algorithm.advantage.per_prompt=false"])
        )
        == []
    )


def test_a_lora_rank_past_the_transformers_width(tmp_path):
    """Width = heads x head dim of the transformer's config: the toy's builtin folder (4 x 16),
    SD3.5-M's shipped architecture file for its Hub id (24 x 64)."""
    (caution,) = config_cautions(load_config(None, ["model.lora.rank=65"]))
    assert caution.startswith("model.lora.rank=65 is above the transformer's width 64")
    assert config_cautions(load_config(None, ["model.lora.rank=64"])) == []
    sd3 = load_config("experiment/diffusion/sd3_5/online_grpo_ocr", ["model.lora.rank=2048"])
    assert any(c.startswith("model.lora.rank=2048 is above the transformer's width 1536") for c in config_cautions(sd3))
    full = load_config(None, ["model.lora.rank=100000", "model.train_mode=full"])  # no adapter: the rank is unread
    assert config_cautions(full) == []


def test_an_output_dir_at_the_root_or_inside_the_package(tmp_path):
    from pathlib import Path

    import genalign

    package = Path(genalign.__file__).resolve().parent
    (root,) = config_cautions(load_config(None, ["trainer.output_dir=/"]))
    assert root.startswith("trainer.output_dir=/ is the filesystem root")
    (inside,) = config_cautions(load_config(None, [f"trainer.output_dir={package}/runs/x"]))
    assert f"is inside the installed genalign package ({package})" in inside
    assert config_cautions(load_config(None, [f"trainer.output_dir={tmp_path}/run"])) == []
