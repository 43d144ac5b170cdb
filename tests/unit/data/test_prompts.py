"""Manifest readers: formats, metadata, path resolution, and errors that name file:row and the fix."""

import json
from pathlib import Path

import pytest

import genalign
from genalign.data.prompts import (
    MAX_REPORTED_ERRORS,
    PACKAGED_DATASETS,
    ManifestError,
    PromptExample,
    load_manifest,
    resolve_data_path,
)


def write(path: Path, text: str) -> str:
    path.write_text(text, encoding="utf-8")
    return str(path)


def test_txt_one_prompt_a_line_ids_are_row_indices(tmp_path):
    path = write(tmp_path / "p.txt", '  a red sign  \r\nA cake that says "Hi"\nthird\n')
    examples = load_manifest(path)
    assert [e.prompt for e in examples] == ["a red sign", 'A cake that says "Hi"', "third"]
    assert [e.prompt_id for e in examples] == [0, 1, 2]
    assert examples[2].source == f"{path}:3"
    assert all(e.metadata == {} for e in examples)


def test_txt_blank_line_is_an_error_naming_key_file_and_line(tmp_path):
    path = write(tmp_path / "p.txt", "one\n   \nthree\n")
    with pytest.raises(ManifestError, match=rf"^data\.manifest: line 2 of {path} is empty; remove it$"):
        load_manifest(path, config_key="data.manifest")


def test_jsonl_extra_fields_become_metadata(tmp_path):
    rows = [{"prompt": "a sign", "target": "OPEN", "tags": ["x"]}, {"prompt": "b"}]
    path = write(tmp_path / "p.jsonl", "".join(json.dumps(row) + "\n" for row in rows))
    examples = load_manifest(path)
    assert examples[0] == PromptExample("a sign", 0, f"{path}:1")
    assert examples[0].metadata == {"target": "OPEN", "tags": ["x"]}
    assert examples[1].metadata == {}


def test_jsonl_collects_every_row_error(tmp_path):
    lines = [
        '{"prompt": "fine"}',
        "",
        "{not json",
        "[1, 2]",
        '{"text": "no prompt"}',
        '{"prompt": 3}',
        '{"prompt": "x", "prompt_embeds": [0.1]}',
        '"just a string"',
    ]
    path = write(tmp_path / "p.jsonl", "\n".join(lines) + "\n")
    with pytest.raises(ManifestError) as info:
        load_manifest(path)
    message = str(info.value)
    assert "has 7 bad row(s)" in message
    assert f"line 2 of {path} is empty" in message
    assert f"line 3 of {path} is not JSON (Expecting property name" in message
    assert f"line 4 of {path} is a JSON list" in message
    assert f'line 5 of {path} has no "prompt" field' in message
    assert f'line 6 of {path} has a "prompt" of type int' in message
    assert f"line 7 of {path} carries precomputed-embedding field(s) ['prompt_embeds']" in message
    assert "computed by the model family from the prompt" in message
    assert f"line 8 of {path} is a JSON string" in message
    assert "line 1 " not in message


@pytest.mark.parametrize("field", ["pooled_prompt_embeds", "negative_prompt_embeds", "embedding", "text_embeds"])
def test_every_legacy_embedding_field_is_refused(tmp_path, field):
    path = write(tmp_path / "p.jsonl", json.dumps({"prompt": "x", field: [1.0]}) + "\n")
    with pytest.raises(ManifestError, match=field):
        load_manifest(path)


def test_json_list_of_strings_and_objects(tmp_path):
    path = write(tmp_path / "p.json", json.dumps(["plain", {"prompt": "obj", "target": "T"}]))
    examples = load_manifest(path)
    assert [(e.prompt, e.prompt_id, e.source) for e in examples] == [
        ("plain", 0, f"{path}[0]"),
        ("obj", 1, f"{path}[1]"),
    ]
    assert examples[1].metadata == {"target": "T"}


def test_json_errors_name_the_index(tmp_path):
    path = write(tmp_path / "p.json", json.dumps(["ok", 5, {"prompt": ""}, {"embedding": [1]}]))
    with pytest.raises(ManifestError) as info:
        load_manifest(path)
    message = str(info.value)
    assert f"item [1] of {path} is a JSON int" in message
    assert f'item [2] of {path} has an empty "prompt"' in message
    assert f"item [3] of {path} carries precomputed-embedding" in message


def test_json_must_be_a_list(tmp_path):
    with pytest.raises(ManifestError, match="must hold a JSON list"):
        load_manifest(write(tmp_path / "p.json", json.dumps({"prompt": "x"})))
    with pytest.raises(ManifestError, match="is not valid JSON"):
        load_manifest(write(tmp_path / "q.json", "[1,"))


def test_error_list_is_capped(tmp_path):
    path = write(tmp_path / "p.txt", "ok\n" + " \n" * (MAX_REPORTED_ERRORS + 5))
    with pytest.raises(ManifestError) as info:
        load_manifest(path)
    message = str(info.value)
    assert message.count("is empty; remove it") == MAX_REPORTED_ERRORS
    assert message.endswith("... and 5 more")


def test_unknown_extension_lists_supported_ones(tmp_path):
    with pytest.raises(ManifestError, match=r"unsupported extension '\.csv'; use one of \.txt, \.jsonl, \.json"):
        load_manifest(write(tmp_path / "p.csv", "a\n"))


def test_empty_manifest_is_an_error(tmp_path):
    with pytest.raises(ManifestError, match="holds no prompts"):
        load_manifest(write(tmp_path / "p.txt", ""))
    with pytest.raises(ManifestError, match="holds no prompts"):
        load_manifest(write(tmp_path / "p.json", "[]"))


def test_non_utf8_file_is_an_error(tmp_path):
    path = tmp_path / "p.txt"
    path.write_bytes(b"caf\xe9\n")
    with pytest.raises(ManifestError, match="is not UTF-8 text"):
        load_manifest(str(path))


def test_bom_is_not_part_of_the_first_prompt(tmp_path):
    path = tmp_path / "p.txt"
    path.write_bytes("\ufeffhello\n".encode())
    assert load_manifest(str(path))[0].prompt == "hello"


def test_resolution_order_cwd_then_data_root_then_the_package(tmp_path, monkeypatch):
    cwd, data_root = tmp_path / "cwd", tmp_path / "root"
    (cwd / "sets").mkdir(parents=True)
    (data_root / "sets").mkdir(parents=True)
    write(data_root / "sets" / "p.txt", "from root\n")
    monkeypatch.chdir(cwd)
    monkeypatch.setenv("GENALIGN_DATA_ROOT", str(data_root))
    assert resolve_data_path("sets/p.txt") == data_root / "sets" / "p.txt"
    write(cwd / "sets" / "p.txt", "from cwd\n")
    assert load_manifest("sets/p.txt")[0].prompt == "from cwd"
    # the recipes' prompt sets: package data, found from any directory (installed: never the
    # package's parent, site-packages, whose datasets/ is Hugging Face's library)
    assert resolve_data_path("datasets/ocr/train.txt") == PACKAGED_DATASETS / "ocr" / "train.txt"
    assert PACKAGED_DATASETS.parent == Path(genalign.__file__).resolve().parent


def test_missing_file_lists_where_it_looked(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GENALIGN_DATA_ROOT", str(tmp_path / "root"))
    with pytest.raises(FileNotFoundError) as info:
        resolve_data_path("nope/p.txt")
    message = f"{info.value}\nhint: {info.value.hint}"
    assert str(tmp_path / "nope" / "p.txt") in message and str(tmp_path / "root" / "nope" / "p.txt") in message
    assert "GENALIGN_DATA_ROOT" in message
    with pytest.raises(FileNotFoundError, match="not found"):
        resolve_data_path(str(tmp_path / "absent.txt"))


def test_prompt_example_is_hashable_despite_metadata():
    example = PromptExample("p", 0, "f:1", {"target": "x"})
    assert hash(example) == hash(PromptExample("p", 0, "f:1"))
