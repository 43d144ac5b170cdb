from dataclasses import dataclass

import pytest

from genalign.rewards.options import parse_options


@dataclass
class _Opts:
    model_name: str = "m"
    dtype: str = "float32"


def test_known_keys_build_the_dataclass():
    assert parse_options("clip_score", _Opts, {"dtype": "float16"}) == _Opts(dtype="float16")


def test_unknown_keys_name_every_config_key_with_a_suggestion():
    with pytest.raises(TypeError) as info:
        parse_options("clip_score", _Opts, {"model_nam": "x", "zzz": 1})
    message = str(info.value)
    assert "reward.kwargs.clip_score.model_nam (did you mean 'model_name'?)" in message
    assert "reward.kwargs.clip_score.zzz" in message
    assert "Valid: model_name, dtype" in message
