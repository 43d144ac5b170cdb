"""Published files of the external models the recipes name (tests/fixtures/, whose README says
where each came from) and the tiny test models built from them (on sys.path via pytest
`pythonpath = ["tests"]`)."""

from __future__ import annotations

from pathlib import Path

import torch

FIXTURES = Path(__file__).resolve().parent / "fixtures"
"""Published files of the external models and reference code (tests/fixtures/README.md)."""
CLIP_SPECIALS = {"<|startoftext|>": 49406, "<|endoftext|>": 49407}
"""CLIP's BPE special tokens and their ids (the last two of its 49408)."""


def tiny_clip_tokenizer_files(path: Path, tokenizer_config: Path | None = None) -> None:
    """A character-level CLIP vocabulary with CLIP's special-token ids (49406 / 49407, so the
    text tower pools at the real end-of-text id) into `path`, with the published
    tokenizer_config.json when one is given. The real 49408-entry vocabulary is not shipped
    (tests/fixtures/README.md)."""
    import json
    import shutil

    vocab = dict(CLIP_SPECIALS)
    for suffix in ("", "</w>"):
        for char in "abcdefghijklmnopqrstuvwxyz":
            vocab[char + suffix] = len(vocab) - 2
    path.mkdir(parents=True, exist_ok=True)
    (path / "vocab.json").write_text(json.dumps(vocab))
    (path / "merges.txt").write_text("#version: 0.2\n")
    if tokenizer_config is not None:
        shutil.copy(tokenizer_config, path / "tokenizer_config.json")


def save_tiny_clip(path: Path, processor_repo: str = "openai--clip-vit-large-patch14") -> Path:
    """A tiny random CLIPModel (seed 0) built from open_clip's ViT-L-14 architecture
    (tests/fixtures/upstream/mlfoundations--open_clip/ViT-L-14.json) shrunk in width and depth
    only: the real 224-pixel input, 14-pixel patches, 77-token context and 49408-token
    vocabulary; the published preprocessor_config.json of `processor_repo`; the
    character-level tokenizer of `tiny_clip_tokenizer_files`. Written by save_pretrained."""
    import json
    import shutil

    from transformers import CLIPConfig, CLIPModel, CLIPTokenizer

    architecture = json.loads((FIXTURES / "upstream" / "mlfoundations--open_clip" / "ViT-L-14.json").read_text())
    vision, text = architecture["vision_cfg"], architecture["text_cfg"]
    tiny_clip_tokenizer_files(path)
    CLIPTokenizer(str(path / "vocab.json"), str(path / "merges.txt"), pad_token="<|endoftext|>").save_pretrained(path)
    config = CLIPConfig(
        text_config=dict(vocab_size=text["vocab_size"], max_position_embeddings=text["context_length"],
                         hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
                         bos_token_id=CLIP_SPECIALS["<|startoftext|>"], eos_token_id=CLIP_SPECIALS["<|endoftext|>"],
                         pad_token_id=CLIP_SPECIALS["<|endoftext|>"], hidden_act="quick_gelu"),
        vision_config=dict(image_size=vision["image_size"], patch_size=vision["patch_size"], hidden_size=16,
                           intermediate_size=32, num_hidden_layers=1, num_attention_heads=2, hidden_act="quick_gelu"),
        projection_dim=8, logit_scale_init_value=3.0)
    torch.manual_seed(0)
    CLIPModel(config).save_pretrained(path)
    shutil.copy(FIXTURES / "hub" / processor_repo / "preprocessor_config.json", path / "preprocessor_config.json")
    return path
