"""hpsv2 / hpsv21: a random tiny CLIP of HPS's published architecture (open_clip ViT-H-14,
shrunk in width and depth) in open_clip's state-dict layout, run by an open_clip-style forward
written here by hand, must give the same embeddings once converted into a transformers
CLIPModel; the reward's score is the cosine of those embeddings. Prompts go through CLIP's real
tokenizer (tests/published.py)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import save_file

from genalign.rewards.hps import HPSv2Reward, HPSv21Reward, open_clip_to_transformers


def hps_config(tiny: bool = True):
    """HPS's architecture (open_clip ViT-H-14, HPSv2's published copy), shrunk in width and depth
    unless `tiny` is False."""
    from published import OPEN_CLIP_VIT_H_14, open_clip_config

    return open_clip_config(OPEN_CLIP_VIT_H_14, tiny=tiny)


def open_clip_state(config, seed: int = 0, device: str = "cpu") -> dict[str, torch.Tensor]:
    """Random tensors with open_clip ViT CLIP names and shapes (OpenAI layout) for the
    transformers CLIPConfig `config`; on "meta", the shapes alone."""
    g = torch.Generator().manual_seed(seed)
    text, vision = config.text_config, config.vision_config
    embed, grid = config.projection_dim, vision.image_size // vision.patch_size

    def r(*shape, scale=0.2):
        if device == "meta":
            return torch.empty(*shape, device="meta")
        return torch.randn(*shape, generator=g) * scale

    state = {
        "token_embedding.weight": r(text.vocab_size, text.hidden_size),
        "positional_embedding": r(text.max_position_embeddings, text.hidden_size),
        "ln_final.weight": 1 + r(text.hidden_size),
        "ln_final.bias": r(text.hidden_size),
        "text_projection": r(text.hidden_size, embed),
        "logit_scale": torch.tensor(4.6, device=device),
        "visual.conv1.weight": r(vision.hidden_size, 3, vision.patch_size, vision.patch_size),
        "visual.class_embedding": r(vision.hidden_size),
        "visual.positional_embedding": r(grid**2 + 1, vision.hidden_size),
        "visual.ln_pre.weight": 1 + r(vision.hidden_size),
        "visual.ln_pre.bias": r(vision.hidden_size),
        "visual.ln_post.weight": 1 + r(vision.hidden_size),
        "visual.ln_post.bias": r(vision.hidden_size),
        "visual.proj": r(vision.hidden_size, embed),
    }
    for prefix, tower in (("", text), ("visual.", vision)):
        width, hidden = tower.hidden_size, tower.intermediate_size
        for i in range(tower.num_hidden_layers):
            block = f"{prefix}transformer.resblocks.{i}."
            state.update(
                {
                    block + "ln_1.weight": 1 + r(width),
                    block + "ln_1.bias": r(width),
                    block + "attn.in_proj_weight": r(3 * width, width),
                    block + "attn.in_proj_bias": r(3 * width),
                    block + "attn.out_proj.weight": r(width, width),
                    block + "attn.out_proj.bias": r(width),
                    block + "ln_2.weight": 1 + r(width),
                    block + "ln_2.bias": r(width),
                    block + "mlp.c_fc.weight": r(hidden, width),
                    block + "mlp.c_fc.bias": r(hidden),
                    block + "mlp.c_proj.weight": r(width, hidden),
                    block + "mlp.c_proj.bias": r(width),
                }
            )
    return state


def blocks(state, prefix, tower, x, mask=None):
    """open_clip's residual attention blocks (pre-LN, fused in_proj, GELU MLP) on [B, T, D]."""
    width, heads = tower.hidden_size, tower.num_attention_heads
    assert tower.hidden_act == "gelu"  # ViT-H-14.json sets no quick_gelu: open_clip's nn.GELU
    for i in range(tower.num_hidden_layers):
        p = f"{prefix}transformer.resblocks.{i}."
        h = F.layer_norm(x, (width,), state[p + "ln_1.weight"], state[p + "ln_1.bias"])
        q, k, v = F.linear(h, state[p + "attn.in_proj_weight"], state[p + "attn.in_proj_bias"]).chunk(3, dim=-1)
        split = lambda t: t.view(t.shape[0], t.shape[1], heads, width // heads).transpose(1, 2)  # noqa: E731
        attn = F.scaled_dot_product_attention(split(q), split(k), split(v), attn_mask=mask)
        attn = attn.transpose(1, 2).reshape(x.shape)
        x = x + F.linear(attn, state[p + "attn.out_proj.weight"], state[p + "attn.out_proj.bias"])
        h = F.layer_norm(x, (width,), state[p + "ln_2.weight"], state[p + "ln_2.bias"])
        h = F.linear(
            F.gelu(F.linear(h, state[p + "mlp.c_fc.weight"], state[p + "mlp.c_fc.bias"])),
            state[p + "mlp.c_proj.weight"],
            state[p + "mlp.c_proj.bias"],
        )
        x = x + h
    return x


def open_clip_image(state, vision, pixels):
    width, patch = vision.hidden_size, vision.patch_size
    x = F.conv2d(pixels, state["visual.conv1.weight"], stride=patch).flatten(2).transpose(1, 2)  # [B, N, D]
    cls = state["visual.class_embedding"].expand(x.shape[0], 1, width)
    x = torch.cat([cls, x], dim=1) + state["visual.positional_embedding"]
    x = F.layer_norm(x, (width,), state["visual.ln_pre.weight"], state["visual.ln_pre.bias"])
    x = blocks(state, "visual.", vision, x)
    x = F.layer_norm(x[:, 0], (width,), state["visual.ln_post.weight"], state["visual.ln_post.bias"])
    return x @ state["visual.proj"]


def open_clip_text(state, text, tokens):
    x = state["token_embedding.weight"][tokens] + state["positional_embedding"][: tokens.shape[1]]
    causal = torch.full((tokens.shape[1], tokens.shape[1]), float("-inf")).triu(1)
    x = blocks(state, "", text, x, causal)
    x = F.layer_norm(x, (text.hidden_size,), state["ln_final.weight"], state["ln_final.bias"])
    # open_clip pools at argmax(token id): <|endoftext|> is the vocabulary's last (highest) id
    return x[torch.arange(len(tokens)), tokens.argmax(-1)] @ state["text_projection"]


def test_converted_weights_reproduce_the_open_clip_forward():
    from published import clip_tokenizer
    from transformers import CLIPModel

    config = hps_config()
    state = open_clip_state(config)
    model = CLIPModel(config).eval()
    model.load_state_dict(open_clip_to_transformers(state), strict=True)
    size = config.vision_config.image_size
    pixels = torch.randn(2, 3, size, size, generator=torch.Generator().manual_seed(1))
    tokens = clip_tokenizer()(["a cat", "blue sky over green hills"], padding=True, return_tensors="pt")
    with torch.no_grad():
        image = model.get_image_features(pixel_values=pixels)
        text = model.get_text_features(**tokens)
    image = image if isinstance(image, torch.Tensor) else image.pooler_output
    text = text if isinstance(text, torch.Tensor) else text.pooler_output
    # float32 through one small block per tower: agreement to rounding (padding after the end
    # token is masked in transformers and causally invisible to it in open_clip)
    torch.testing.assert_close(image, open_clip_image(state, config.vision_config, pixels), rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(
        text, open_clip_text(state, config.text_config, tokens["input_ids"]), rtol=1e-4, atol=1e-5
    )


def test_the_mapping_covers_the_published_vit_h_14_at_full_size():
    """Every tensor of an open_clip ViT-H-14 at its published size (32 vision blocks of 16 heads of
    80, 24 text blocks of 16 heads of 64) has a transformers home of the right shape."""
    from transformers import CLIPModel

    config = hps_config(tiny=False)
    with torch.device("meta"):
        model = CLIPModel(config)
    model.load_state_dict(open_clip_to_transformers(open_clip_state(config, device="meta")), strict=True, assign=True)
    vision = model.config.vision_config
    assert (vision.num_hidden_layers, vision.num_attention_heads, vision.hidden_size) == (32, 16, 1280)
    assert model.visual_projection.weight.shape == (1024, 1280) and model.text_projection.weight.shape == (1024, 1024)


def test_unknown_keys_are_refused():
    with pytest.raises(ValueError, match=r"unknown keys \['visual.head.weight'\]"):
        open_clip_to_transformers({**open_clip_state(hps_config()), "visual.head.weight": torch.zeros(1)})


@pytest.fixture(scope="module")
def hps_files(tmp_path_factory):
    """A base-model directory as laion's CLIP-H repository holds one (config, CLIP's tokenizer
    with laion's tokenizer config, laion's processor config) and HPS-style weights in safetensors."""
    import shutil

    from published import LAION_CLIP_H, clip_tokenizer_files

    root = tmp_path_factory.mktemp("hps")
    base = root / "base"
    config = hps_config()
    config.save_pretrained(base)
    clip_tokenizer_files(base, LAION_CLIP_H / "tokenizer_config.json")
    shutil.copy(LAION_CLIP_H / "preprocessor_config.json", base / "preprocessor_config.json")
    weights = root / "hps.safetensors"
    save_file(open_clip_state(config), str(weights))
    return {"base_model": str(base), "weights_path": str(weights)}


def test_score_is_the_cosine_of_the_hps_embeddings(hps_files):
    images = torch.randint(0, 256, (2, 3, 40, 48), generator=torch.Generator().manual_seed(2), dtype=torch.uint8)
    prompts = ["a cat", "b d"]
    reward = HPSv2Reward(**hps_files)
    scores = reward.score(images, prompts, [{}, {}])
    expected = (reward.encoder.image_embeds(images) * reward.encoder.text_embeds(prompts)).sum(-1)
    assert scores.shape == (2,) and torch.equal(scores, expected) and scores.abs().max() <= 1
    assert HPSv21Reward(**hps_files).name == "hpsv21"
    # HPSv2's letterbox at the model's image size, not the base model's processor crop
    # (the transform itself: tests/unit/rewards/test_image_transform.py)
    transform = reward.encoder.transform
    assert (transform.longest_edge, transform.shortest_edge, transform.resampler) == (224, None, "tensor")


def test_missing_or_mismatched_weights_name_the_key(hps_files, tmp_path):
    with pytest.raises(FileNotFoundError, match=r"reward.kwargs.hpsv2.weights_path=None"):
        HPSv2Reward(base_model=hps_files["base_model"])
    partial = tmp_path / "partial.safetensors"
    save_file({k: v for k, v in open_clip_state(hps_config()).items() if k != "visual.proj"}, str(partial))
    with pytest.raises(ValueError, match=r"reward.kwargs.hpsv21.weights_path=.*does not fit.*visual_projection"):
        HPSv21Reward(base_model=hps_files["base_model"], weights_path=str(partial))
    with pytest.raises(FileNotFoundError, match=r"reward.kwargs.hpsv2.base_model='/nowhere'"):
        HPSv2Reward(base_model="/nowhere", weights_path=hps_files["weights_path"])
