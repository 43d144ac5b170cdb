"""`config/cautions.py`: valid settings worth a warning, each one line naming the key."""

from genalign.config.cautions import config_cautions
from genalign.config.loader import load_config


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
