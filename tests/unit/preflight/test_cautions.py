"""`preflight/cautions.py`: valid settings worth a warning, each one line naming the key."""

from genalign.preflight.cautions import config_cautions
from genalign.preflight.load import load_config


def test_the_default_recipe_has_no_caution():
    assert config_cautions(load_config(None)) == []


def test_each_caution_names_its_key(tmp_path):
    (tmp_path / "one.txt").write_text("a red circle\n")
    cfg = load_config(None, ["reward.components.toy_shape=-0.5", "eval.gold_rewards.toy_shape_judge=-1",
                             "reward.components.ocr=1", f"data.manifest={tmp_path / 'one.txt'}"])
    cautions = config_cautions(cfg)
    assert [c.split(" ")[0] for c in cautions] == ["reward.components.toy_shape=-0.5",
                                                   "eval.gold_rewards.toy_shape_judge=-1", "reward.components.ocr",
                                                   "data.manifest"]


def test_ray_gpu_counts_on_a_machine_without_gpus(monkeypatch):
    from genalign.placement import resources

    cfg = load_config(None, ["rollout.engine=ray", "/base/distributed=ray_rollout"])
    monkeypatch.setattr(resources, "environment_facts", lambda: resources.EnvironmentFacts((), None))
    (caution,) = config_cautions(cfg)
    assert caution.startswith("distributed.resources.trainer.num_gpus=1, distributed.resources.rollout.num_gpus=auto, "
                              "but no GPU is visible")
    monkeypatch.setattr(resources, "environment_facts", lambda: resources.EnvironmentFacts((0, 1), None))
    assert config_cautions(cfg) == []
