"""data.manifest=hf://datasets/<repo>[@revision][:split]: a Hub dataset's rows as prompts, through
the datasets library (replaced by a local fake: no network)."""

from __future__ import annotations

import pytest
from hub_fakes import FakeHub
from PIL import Image

from genalign.data.hub_prompts import HubDataset, parse_reference
from genalign.data.prompts import ManifestError, load_manifest


@pytest.fixture
def hub(tmp_path, monkeypatch):
    return FakeHub(tmp_path / "hub").install(monkeypatch)


@pytest.mark.parametrize(
    "reference, parsed",
    [
        ("hf://datasets/me/prompts", HubDataset("me/prompts", None, "train")),
        ("hf://datasets/me/prompts:test", HubDataset("me/prompts", None, "test")),
        ("hf://datasets/me/prompts@v1.0:train[:100]", HubDataset("me/prompts", "v1.0", "train[:100]")),
        ("hf://datasets/prompts", None),
        ("hf://datasets/", None),
    ],
)
def test_references(reference, parsed):
    assert parse_reference(reference) == parsed


def test_rows_become_prompts_with_their_other_json_columns_as_metadata(hub, caplog):
    hub.add_dataset(
        "me/geneval",
        "test",
        [
            {
                "prompt": "a photo of two cups",
                "tag": "counting",
                "include": [{"class": "cup", "count": 2}],
                "image": Image.new("RGB", (2, 2)),
            },
            {
                "prompt": "a red bench",
                "tag": "colors",
                "include": [{"class": "bench", "count": 1, "color": "red"}],
                "image": Image.new("RGB", (2, 2)),
            },
        ],
    )
    with caplog.at_level("INFO", logger="genalign"):
        examples = load_manifest("hf://datasets/me/geneval:test", "data.eval_manifest")
    assert [e.prompt for e in examples] == ["a photo of two cups", "a red bench"]
    assert examples[0].metadata == {"tag": "counting", "include": [{"class": "cup", "count": 2}]}
    assert examples[1].source == "hf://datasets/me/geneval:test[1]" and examples[1].prompt_id == 1
    assert "columns image are not JSON data" in caplog.text  # left out, and said so


def test_bad_rows_and_missing_columns_are_listed_naming_the_row(hub):
    hub.add_dataset("me/bad", "train", [{"text": "a cat"}, {"text": "a dog"}])
    with pytest.raises(ManifestError) as err:
        load_manifest("hf://datasets/me/bad", "data.manifest")
    assert str(err.value).startswith("data.manifest: hf://datasets/me/bad:train has 2 bad row(s)")
    assert "row [0] of hf://datasets/me/bad:train has no \"prompt\" field (fields: ['text'])" in str(err.value)


def test_a_missing_dataset_is_one_line(hub):
    with pytest.raises(ManifestError) as err:
        load_manifest("hf://datasets/me/missing", "data.manifest")
    assert str(err.value).startswith("data.manifest: cannot load the Hub dataset hf://datasets/me/missing:train")
    assert "\n" not in str(err.value) and "HF_HUB_OFFLINE" in err.value.hint
