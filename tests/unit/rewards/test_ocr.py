import logging
import shutil

import numpy as np
import pytest
import torch
from PIL import Image, ImageDraw, ImageFont

from genalign.rewards.ocr import OCRReward, levenshtein, ocr_text_reward, quoted_target


@pytest.mark.parametrize(
    "a, b, expected",
    [
        ("kitten", "sitting", 3),  # k->s, e->i, +g
        ("flaw", "lawn", 2),  # -f, +n
        ("gumbo", "gambol", 2),  # u->a, +l
        ("", "abc", 3),
        ("abc", "", 3),
        ("abc", "abc", 0),
        ("a", "b", 1),
        ("ab", "ba", 2),  # no transpositions in plain Levenshtein
    ],
)
def test_levenshtein_hand_values(a, b, expected):
    assert levenshtein(a, b) == expected
    assert levenshtein(b, a) == expected


def test_quoted_target_takes_first_pair_lowercase_no_spaces():
    assert quoted_target('A sign that says "Hello World" and "other"') == "helloworld"
    assert quoted_target("no quotes here") is None
    assert quoted_target('one "unclosed quote') is None
    assert quoted_target('empty "" target') is None


def test_ocr_text_reward_rule():
    assert ocr_text_reward("hello", "xxhelloxx") == 1.0  # substring -> 1
    assert ocr_text_reward("hello", "helo") == pytest.approx(0.8)  # 1 - 1/5
    assert ocr_text_reward("hello", "") == 0.0  # distance 5 of 5
    assert ocr_text_reward("ab", "zzzzzzzzzz") == 0.0  # distance 10 capped at len 2 -> floor 0


def render(word: str, size: int) -> torch.Tensor:
    image = Image.new("RGB", (size, size), "white")
    if word:
        ImageDraw.Draw(image).text((4, size // 3), word, fill="black", font=ImageFont.load_default(size=size // 3))
    return torch.from_numpy(np.asarray(image).copy()).permute(2, 0, 1)  # [3, H, W] uint8


@pytest.fixture(scope="module")
def ocr():
    return OCRReward()


def test_rendered_word_scores_high_and_blank_scores_low(ocr):
    large = ocr.score(torch.stack([render("cat", 128), render("", 128)]), ['a sign that says "Cat"'] * 2, [{}] * 2)
    assert large.dtype == torch.float32 and large.shape == (2,)
    assert large[0] > 0.6
    assert large[1] == 0.0
    small = ocr.score(render("hello", 64)[None], ['the word "hello"'], [{}])
    assert small[0] > 0.6


def test_prompt_without_quotes_scores_zero_and_is_counted(ocr, caplog):
    before = ocr.missing_target_count
    with caplog.at_level(logging.WARNING):
        scores = ocr.score(torch.stack([render("cat", 64)] * 2), ["a cat", "a dog"], [{}, {}])
    assert scores.tolist() == [0.0, 0.0]
    assert ocr.missing_target_count == before + 2
    assert "no text between double quotes" in caplog.text


def test_unknown_option_and_engine_are_named_errors(monkeypatch):
    with pytest.raises(TypeError, match=r"reward\.kwargs\.ocr\.engin .*did you mean 'engine'"):
        OCRReward(engin="rapidocr")
    with pytest.raises(ValueError, match=r"reward\.kwargs\.ocr\.engine='paddle'"):
        OCRReward(engine="paddle")
    monkeypatch.setenv("PATH", "")
    with pytest.raises(FileNotFoundError, match="tesseract"):
        OCRReward(engine="tesseract")


@pytest.mark.skipif(
    shutil.which("tesseract") is None, reason="needs the tesseract binary (apt-get install tesseract-ocr)"
)
def test_tesseract_engine_reads_a_rendered_word():
    reward = OCRReward(engine="tesseract")
    scores = reward.score(torch.stack([render("hello", 128), render("", 128)]), ['"hello"'] * 2, [{}, {}])
    assert scores[0] > 0.6 and scores[1] == 0.0


def test_lines_below_paddleocrs_drop_score_are_dropped_by_the_engine(monkeypatch):
    """Flow-GRPO reads PaddleOCR's `ocr()` result, from which lines scored below its drop_score
    (0.5) are already gone: rapidocr gets the same threshold (its `text_score`)."""
    import rapidocr_onnxruntime

    built = {}

    class Engine:
        def __init__(self, **kwargs):
            built.update(kwargs)

        def __call__(self, image):
            return [([[0, 0]] * 4, "hel", 0.9), ([[0, 0]] * 4, "lo", 0.0)], None  # as the engine returns

    monkeypatch.setattr(rapidocr_onnxruntime, "RapidOCR", Engine)
    reward = OCRReward()
    assert built["text_score"] == 0.5 and reward.options.min_line_score == 0.5
    assert OCRReward(min_line_score=0.0) and built["text_score"] == 0.0
    # what the engine returns is then filtered by the rule's own "confidence > 0"
    assert reward.score(render("", 32)[None], ['"hel"'], [{}]).tolist() == [1.0]


def test_the_engine_settings_are_keys_of_rapidocrs_published_config(monkeypatch):
    """Every setting OCRReward hands rapidocr is a `Global` key of the published config.yaml of
    rapidocr-onnxruntime 1.4.4 (the pinned version; rapidocr files an unknown key away unread):
    its line score is PaddleOCR's drop_score (0.5) already, and its angle classifier, on in the
    file, is turned off as Flow-GRPO's `use_angle_cls=False`."""
    from pathlib import Path

    import rapidocr_onnxruntime
    import yaml
    from published import RAPIDOCR_CONFIG

    config = yaml.safe_load(RAPIDOCR_CONFIG.read_text())
    built = {}

    class Engine:
        def __init__(self, **kwargs):
            built.update(kwargs)

    monkeypatch.setattr(rapidocr_onnxruntime, "RapidOCR", Engine)
    reward = OCRReward()
    assert built and set(built) <= set(config["Global"])
    assert config["Global"]["text_score"] == reward.options.min_line_score == built["text_score"]
    assert config["Global"]["use_cls"] is True and built["use_cls"] is False
    # the engine the tests run is the version whose file this is
    installed = Path(rapidocr_onnxruntime.__file__).parent / "config.yaml"
    assert installed.read_bytes() == RAPIDOCR_CONFIG.read_bytes()
