"""Published files of the external models the recipes name (tests/fixtures/, whose README says
where each came from) and the tiny test models built from them (on sys.path via pytest
`pythonpath = ["tests"]`): the tests hold genalign to these files, and tiny models are these
real configs shrunk in width and depth only, with the real tokenizers and label sets."""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

import torch

FIXTURES = Path(__file__).resolve().parent / "fixtures"
"""Published files of the external models and reference code (tests/fixtures/README.md)."""
PYPI = FIXTURES / "pypi"
"""Files inside published packages: `pypi/<distribution>-<version>/<path in the archive>`."""
LAION_CLIP_H = FIXTURES / "hub" / "laion--CLIP-ViT-H-14-laion2B-s32B-b79K"
"""The CLIP-H repository PickScore and HPS take their tokenizer and processor from."""
OPENAI_CLIP_L = FIXTURES / "hub" / "openai--clip-vit-large-patch14"
OPEN_CLIP_VIT_L_14 = FIXTURES / "upstream" / "mlfoundations--open_clip" / "ViT-L-14.json"
"""open_clip's CLIP ViT-L/14: the CLIP-L scorers and GenEval's colour classifier."""
OPEN_CLIP_VIT_H_14 = PYPI / "hpsv2-1.2.0" / "hpsv2" / "src" / "open_clip" / "model_configs" / "ViT-H-14.json"
"""open_clip's ViT-H-14 as HPSv2's own open_clip copy ships it: the architecture of laion's
CLIP-H, which HPS v2 / v2.1 and PickScore fine-tune."""
CLIP_BPE = PYPI / "open_clip_torch-3.3.0" / "open_clip" / "bpe_simple_vocab_16e6.txt.gz"
"""CLIP's byte-pair encoding, as open_clip (and OpenAI's CLIP) ship it."""
CLIP_BPE_MERGES = 49152 - 256 - 2
"""The merges CLIP's tokenizer keeps from the file (openai/CLIP `simple_tokenizer.py`, open_clip's
`SimpleTokenizer`: lines 1 .. 48894): 2 x 256 byte symbols + 48894 merges + 2 specials = 49408."""
BLIP_MED_LARGE = PYPI / "salesforce_lavis-1.0.2" / "lavis" / "configs" / "models" / "med_large_config.json"
"""BLIP's BERT text encoder (MED) for a ViT-L image encoder: ImageReward's text tower."""
GENEVAL_DETECTOR = (
    PYPI
    / "mmdet-2.28.2"
    / "mmdet"
    / ".mim"
    / "configs"
    / "mask2former"
    / "mask2former_swin-s-p4-w7-224_lsj_8x2_50e_coco.py"
)
"""The mmdet config GenEval's evaluate_images.py and Flow-GRPO's reward server load."""
COCO_CLASSES = FIXTURES / "upstream" / "open-mmlab--mmdetection" / "coco_classes.txt"
RAPIDOCR_CONFIG = PYPI / "rapidocr_onnxruntime-1.4.4" / "rapidocr_onnxruntime" / "config.yaml"


def read_json(path: Path) -> dict:
    return json.loads(path.read_text())


# ------------------------------------------------------------------ CLIP's real tokenizer


@lru_cache(maxsize=1)
def clip_bpe() -> tuple[dict[str, int], tuple[str, ...]]:
    """CLIP's vocabulary and merges, derived from the published BPE file as CLIP's tokenizer
    derives them (and as the Hub's CLIP repositories hold them in vocab.json / merges.txt): the
    merges are the file's lines 1 .. CLIP_BPE_MERGES (line 0 is a header); the vocabulary is
    the 256 byte symbols in GPT-2's byte-to-unicode order, the same with the end-of-word mark
    "</w>", one token per merge, then <|startoftext|> and <|endoftext|>. Cached per session."""
    import gzip

    from transformers.convert_slow_tokenizer import bytes_to_unicode

    lines = gzip.decompress(CLIP_BPE.read_bytes()).decode("utf-8").split("\n")
    merges = tuple(lines[1 : 1 + CLIP_BPE_MERGES])
    alphabet = list(bytes_to_unicode().values())
    tokens = alphabet + [symbol + "</w>" for symbol in alphabet] + ["".join(merge.split()) for merge in merges]
    tokens += ["<|startoftext|>", "<|endoftext|>"]
    return {token: index for index, token in enumerate(tokens)}, merges


def clip_tokenizer_files(path: Path, tokenizer_config: Path = LAION_CLIP_H / "tokenizer_config.json") -> Path:
    """CLIP's real tokenizer into `path` as a Hub repository holds it: vocab.json and merges.txt
    (`clip_bpe`) beside the published `tokenizer_config` (laion's CLIP-H by default: the only
    CLIP tokenizer_config.json found; openai's CLIP-L pads with the same <|endoftext|>)."""
    import shutil

    vocab, merges = clip_bpe()
    path.mkdir(parents=True, exist_ok=True)
    (path / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")
    (path / "merges.txt").write_text("#version: 0.2\n" + "".join(merge + "\n" for merge in merges), encoding="utf-8")
    shutil.copy(tokenizer_config, path / "tokenizer_config.json")
    return path


def clip_tokenizer(tokenizer_config: Path = LAION_CLIP_H / "tokenizer_config.json"):
    """transformers' CLIPTokenizer loaded with `from_pretrained` (as the scorers load theirs)
    from `clip_tokenizer_files`."""
    import tempfile

    from transformers import CLIPTokenizer

    with tempfile.TemporaryDirectory() as folder:
        return CLIPTokenizer.from_pretrained(clip_tokenizer_files(Path(folder), tokenizer_config))


# ------------------------------------------------------------------ tiny CLIPs of the real architectures

TINY_HEADS = 2
"""Attention heads per tower of a tiny model (each of the architecture's own head width)."""
TINY_LAYERS = 1
TINY_PROJECTION = 16


def open_clip_config(architecture: Path, quick_gelu: bool | None = None, tiny: bool = True):
    """The transformers CLIPConfig of open_clip's `architecture` file: the file's image size,
    patch size, context length, vocabulary, head widths (vision: `head_width`, text: width /
    heads) and MLP ratio, with the real tokenizer's special-token ids; defaults are open_clip's
    CLIPVisionCfg / CLIPTextCfg ones (head width 64, MLP ratio 4). `tiny` shrinks it in width
    and depth only: TINY_LAYERS layer(s) per tower of TINY_HEADS heads of the real head width,
    a TINY_PROJECTION-wide projection. `quick_gelu`: the activation; None reads the file's
    `quick_gelu` (GELU when absent, as open_clip builds it)."""
    from transformers import CLIPConfig

    spec = read_json(architecture)
    vision, text = spec["vision_cfg"], spec["text_cfg"]
    vocab, _ = clip_bpe()
    assert len(vocab) == text["vocab_size"], (architecture, len(vocab))
    quick_gelu = spec.get("quick_gelu", False) if quick_gelu is None else quick_gelu

    def tower(width: int, layers: int, head_width: int, mlp_ratio: float) -> dict:
        heads = TINY_HEADS if tiny else width // head_width
        hidden = heads * head_width
        return dict(
            hidden_size=hidden,
            intermediate_size=int(hidden * mlp_ratio),
            num_attention_heads=heads,
            num_hidden_layers=TINY_LAYERS if tiny else layers,
            hidden_act="quick_gelu" if quick_gelu else "gelu",
        )

    end = vocab["<|endoftext|>"]
    projection = TINY_PROJECTION if tiny else spec["embed_dim"]  # the towers state it too, as the Hub's configs do
    return CLIPConfig(
        text_config=dict(
            vocab_size=text["vocab_size"],
            max_position_embeddings=text["context_length"],
            bos_token_id=vocab["<|startoftext|>"],
            eos_token_id=end,
            pad_token_id=end,
            projection_dim=projection,
            **tower(text["width"], text["layers"], text["width"] // text["heads"], text.get("mlp_ratio", 4.0)),
        ),
        vision_config=dict(
            image_size=vision["image_size"],
            patch_size=vision["patch_size"],
            projection_dim=projection,
            **tower(vision["width"], vision["layers"], vision.get("head_width", 64), vision.get("mlp_ratio", 4.0)),
        ),
        projection_dim=projection,
        logit_scale_init_value=3.0,
    )


def save_tiny_clip(
    path: Path,
    architecture: Path = OPEN_CLIP_VIT_L_14,
    processor_repo: Path = OPENAI_CLIP_L,
    quick_gelu: bool | None = True,
) -> Path:
    """A tiny random CLIPModel (seed 0) of `open_clip_config(architecture)` with CLIP's real
    tokenizer (`clip_tokenizer_files`) and the published preprocessor_config.json of
    `processor_repo`, written by save_pretrained. The default is OpenAI's CLIP ViT-L/14, whose
    weights use QuickGELU (open_clip's `openai` tag of ViT-L-14 sets quick_gelu)."""
    import shutil

    from transformers import CLIPModel, CLIPTokenizer

    clip_tokenizer_files(path)
    CLIPTokenizer.from_pretrained(path).save_pretrained(path)
    torch.manual_seed(0)
    CLIPModel(open_clip_config(architecture, quick_gelu)).save_pretrained(path)
    shutil.copy(processor_repo / "preprocessor_config.json", path / "preprocessor_config.json")
    return path


# ------------------------------------------------------------------ mmdet configs (GenEval's detector)

CONFIG_BUILTINS = {"dict": dict, "list": list, "tuple": tuple, "range": range, "enumerate": enumerate, "len": len}
"""All an mmdet config file may call: they are plain Python building dicts and lists."""


def mmdet_config(path: Path) -> dict:
    """An mmdet 2.x (mmcv 1.x) config file's settings with its `_base_` files merged in as mmcv's
    `Config.fromfile` merges them: a dict updates its base's dict key by key, recursively, unless
    it sets `_delete_=True`; anything else replaces the base's value."""
    namespace: dict = {"__builtins__": CONFIG_BUILTINS}
    exec(compile(path.read_text(), str(path), "exec"), namespace)  # noqa: S102 (a published config of dicts)
    own = {key: value for key, value in namespace.items() if not key.startswith("__")}
    bases = own.pop("_base_", [])
    merged: dict = {}
    for base in [bases] if isinstance(bases, str) else bases:
        merged.update(mmdet_config((path.parent / base).resolve()))
    return _merge_config(merged, own)


def _merge_config(base: dict, child: dict) -> dict:
    out = dict(base)
    for key, value in child.items():
        if isinstance(value, dict):
            delete = value.get("_delete_", False)
            value = {k: v for k, v in value.items() if k != "_delete_"}
            if isinstance(out.get(key), dict) and not delete:
                value = _merge_config(out[key], value)
        out[key] = value
    return out


TINY_DETECTOR_QUERIES = 20
"""Object queries of the tiny detector (the real 100 cost the CPU tests seconds per image in
mask up-sampling): still more than GenEval's 16 objects per class, and 20 x 80 (query, class)
pairs keep the 100-instance selection (`max_per_image`) a real choice."""


def tiny_geneval_detector(seed: int = 0):
    """A random Mask2FormerForUniversalSegmentation of GenEval's detector config (mmdet's Swin-S
    Mask2Former, COCO instances) shrunk in width and depth only: one Swin block per stage with
    the real window, patch (mmdet's SwinTransformer default 4), MLP ratio and head width (so
    heads 1, 2, 4, 8 of 32 for Swin-S's 3, 6, 12, 24), one pixel-decoder layer and one
    masked-attention decoder layer (transformers' decoder_layers=2) of one 32-wide head,
    TINY_DETECTOR_QUERIES object queries; the 80 COCO classes,
    named by the checkpoints' label set (COCO_CLASSES)."""
    from transformers import Mask2FormerConfig, Mask2FormerForUniversalSegmentation, SwinConfig

    model = mmdet_config(GENEVAL_DETECTOR)["model"]
    swin, head = model["backbone"], model["panoptic_head"]
    head_width = swin["embed_dims"] // swin["num_heads"][0]
    backbone = SwinConfig(
        patch_size=4,
        embed_dim=head_width,
        depths=[1] * len(swin["depths"]),
        num_heads=[heads // swin["num_heads"][0] for heads in swin["num_heads"]],
        window_size=swin["window_size"],
        mlp_ratio=float(swin["mlp_ratio"]),
        qkv_bias=swin["qkv_bias"],
        out_features=["stage1", "stage2", "stage3", "stage4"],
    )
    labels = COCO_CLASSES.read_text().splitlines()
    assert len(labels) == head["num_things_classes"] + head["num_stuff_classes"]
    assert TINY_DETECTOR_QUERIES < head["num_queries"]
    width = 32
    config = Mask2FormerConfig(
        backbone_config=backbone,
        feature_size=width,
        mask_feature_size=width,
        hidden_dim=width,
        encoder_feedforward_dim=2 * width,
        dim_feedforward=2 * width,
        encoder_layers=1,
        decoder_layers=2,
        num_attention_heads=1,
        num_queries=TINY_DETECTOR_QUERIES,
        num_labels=len(labels),
        id2label=dict(enumerate(labels)),
        label2id={label: i for i, label in enumerate(labels)},
    )
    torch.manual_seed(seed)
    return Mask2FormerForUniversalSegmentation(config).eval()


# ------------------------------------------------------------------ BLIP (ImageReward)


def blip_text_config(encoder_width: int | None = None, tiny: bool = True):
    """transformers' BlipTextConfig of BLIP's published MED config for a ViT-L (ImageReward's text
    tower): its vocabulary (30524 = BERT's 30522 + [DEC] + [ENC]), positions, layer-norm eps,
    activation and head width (64), cross-attending to `encoder_width` (default the file's 1024).
    `tiny` shrinks it in width and depth only: TINY_HEADS heads of the real width, the real MLP
    ratio, 2 layers (so that a layer count read back from tensor names is checked)."""
    from transformers import BlipTextConfig

    spec = read_json(BLIP_MED_LARGE)
    head_width = spec["hidden_size"] // spec["num_attention_heads"]
    heads = TINY_HEADS if tiny else spec["num_attention_heads"]
    hidden = heads * head_width
    return BlipTextConfig(
        vocab_size=spec["vocab_size"],
        hidden_size=hidden,
        intermediate_size=hidden * spec["intermediate_size"] // spec["hidden_size"],
        num_hidden_layers=2 if tiny else spec["num_hidden_layers"],
        num_attention_heads=heads,
        encoder_hidden_size=encoder_width or spec["encoder_width"],
        max_position_embeddings=spec["max_position_embeddings"],
        layer_norm_eps=spec["layer_norm_eps"],
        hidden_act=spec["hidden_act"],
        pad_token_id=spec["pad_token_id"],
    )
