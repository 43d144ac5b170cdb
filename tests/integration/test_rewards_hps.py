"""hpsv2 / hpsv21: a random tiny CLIP in open_clip's state-dict layout, run by an open_clip-style
forward written here by hand, must give the same embeddings once converted into a transformers
CLIPModel; the reward's score is the cosine of those embeddings."""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import save_file

from genalign.rewards.hps import HPSv21Reward, HPSv2Reward, open_clip_to_transformers

WIDTH, HEADS, LAYERS, PATCH, SIZE, CONTEXT, VOCAB, EMBED = 16, 2, 2, 8, 32, 16, 30, 8


def open_clip_state(seed: int = 0) -> dict[str, torch.Tensor]:
    """Random tensors with open_clip ViT CLIP names and shapes (OpenAI layout)."""
    g = torch.Generator().manual_seed(seed)

    def r(*shape, scale=0.2):
        return torch.randn(*shape, generator=g) * scale

    state = {"token_embedding.weight": r(VOCAB, WIDTH), "positional_embedding": r(CONTEXT, WIDTH),
             "ln_final.weight": 1 + r(WIDTH), "ln_final.bias": r(WIDTH), "text_projection": r(WIDTH, EMBED),
             "logit_scale": torch.tensor(4.6), "visual.conv1.weight": r(WIDTH, 3, PATCH, PATCH),
             "visual.class_embedding": r(WIDTH),
             "visual.positional_embedding": r((SIZE // PATCH) ** 2 + 1, WIDTH),
             "visual.ln_pre.weight": 1 + r(WIDTH), "visual.ln_pre.bias": r(WIDTH),
             "visual.ln_post.weight": 1 + r(WIDTH), "visual.ln_post.bias": r(WIDTH), "visual.proj": r(WIDTH, EMBED)}
    for prefix in ("", "visual."):
        for i in range(LAYERS):
            block = f"{prefix}transformer.resblocks.{i}."
            state.update({block + "ln_1.weight": 1 + r(WIDTH), block + "ln_1.bias": r(WIDTH),
                          block + "attn.in_proj_weight": r(3 * WIDTH, WIDTH), block + "attn.in_proj_bias": r(3 * WIDTH),
                          block + "attn.out_proj.weight": r(WIDTH, WIDTH), block + "attn.out_proj.bias": r(WIDTH),
                          block + "ln_2.weight": 1 + r(WIDTH), block + "ln_2.bias": r(WIDTH),
                          block + "mlp.c_fc.weight": r(4 * WIDTH, WIDTH), block + "mlp.c_fc.bias": r(4 * WIDTH),
                          block + "mlp.c_proj.weight": r(WIDTH, 4 * WIDTH), block + "mlp.c_proj.bias": r(WIDTH)})
    return state


def blocks(state, prefix, x, mask=None):
    """open_clip's residual attention blocks (pre-LN, fused in_proj, GELU MLP) on [B, T, D]."""
    for i in range(LAYERS):
        p = f"{prefix}transformer.resblocks.{i}."
        h = F.layer_norm(x, (WIDTH,), state[p + "ln_1.weight"], state[p + "ln_1.bias"])
        q, k, v = F.linear(h, state[p + "attn.in_proj_weight"], state[p + "attn.in_proj_bias"]).chunk(3, dim=-1)
        split = lambda t: t.view(t.shape[0], t.shape[1], HEADS, WIDTH // HEADS).transpose(1, 2)  # noqa: E731
        attn = F.scaled_dot_product_attention(split(q), split(k), split(v), attn_mask=mask)
        attn = attn.transpose(1, 2).reshape(x.shape)
        x = x + F.linear(attn, state[p + "attn.out_proj.weight"], state[p + "attn.out_proj.bias"])
        h = F.layer_norm(x, (WIDTH,), state[p + "ln_2.weight"], state[p + "ln_2.bias"])
        h = F.linear(F.gelu(F.linear(h, state[p + "mlp.c_fc.weight"], state[p + "mlp.c_fc.bias"])),
                     state[p + "mlp.c_proj.weight"], state[p + "mlp.c_proj.bias"])
        x = x + h
    return x


def open_clip_image(state, pixels):
    x = F.conv2d(pixels, state["visual.conv1.weight"], stride=PATCH).flatten(2).transpose(1, 2)  # [B, N, D]
    cls = state["visual.class_embedding"].expand(x.shape[0], 1, WIDTH)
    x = torch.cat([cls, x], dim=1) + state["visual.positional_embedding"]
    x = F.layer_norm(x, (WIDTH,), state["visual.ln_pre.weight"], state["visual.ln_pre.bias"])
    x = blocks(state, "visual.", x)
    x = F.layer_norm(x[:, 0], (WIDTH,), state["visual.ln_post.weight"], state["visual.ln_post.bias"])
    return x @ state["visual.proj"]


def open_clip_text(state, tokens):
    x = state["token_embedding.weight"][tokens] + state["positional_embedding"][:tokens.shape[1]]
    causal = torch.full((tokens.shape[1], tokens.shape[1]), float("-inf")).triu(1)
    x = blocks(state, "", x, causal)
    x = F.layer_norm(x, (WIDTH,), state["ln_final.weight"], state["ln_final.bias"])
    return x[torch.arange(len(tokens)), tokens.argmax(-1)] @ state["text_projection"]  # at the end token


def hf_config():
    from transformers import CLIPConfig

    tower = dict(hidden_size=WIDTH, intermediate_size=4 * WIDTH, num_hidden_layers=LAYERS, num_attention_heads=HEADS,
                 hidden_act="gelu", layer_norm_eps=1e-5)
    return CLIPConfig(text_config=dict(vocab_size=VOCAB, max_position_embeddings=CONTEXT, bos_token_id=VOCAB - 2,
                                       eos_token_id=VOCAB - 1, pad_token_id=0, **tower),
                      vision_config=dict(image_size=SIZE, patch_size=PATCH, **tower), projection_dim=EMBED)


def test_converted_weights_reproduce_the_open_clip_forward():
    from transformers import CLIPModel

    state = open_clip_state()
    model = CLIPModel(hf_config()).eval()
    model.load_state_dict(open_clip_to_transformers(state), strict=True)
    pixels = torch.randn(2, 3, SIZE, SIZE, generator=torch.Generator().manual_seed(1))
    tokens = torch.tensor([[VOCAB - 2, 5, 7, VOCAB - 1, 0, 0], [VOCAB - 2, 3, 4, 9, 11, VOCAB - 1]])
    with torch.no_grad():
        image = model.get_image_features(pixel_values=pixels)
        text = model.get_text_features(input_ids=tokens, attention_mask=(tokens != 0) | (tokens == VOCAB - 2))
    image = image if isinstance(image, torch.Tensor) else image.pooler_output
    text = text if isinstance(text, torch.Tensor) else text.pooler_output
    # float32 through two small blocks: agreement to rounding (padding after the end token is
    # masked in transformers and causally invisible to it in open_clip)
    torch.testing.assert_close(image, open_clip_image(state, pixels), rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(text, open_clip_text(state, tokens), rtol=1e-4, atol=1e-5)


def test_unknown_keys_are_refused():
    with pytest.raises(ValueError, match=r"unknown keys \['visual.head.weight'\]"):
        open_clip_to_transformers({**open_clip_state(), "visual.head.weight": torch.zeros(1)})


@pytest.fixture(scope="module")
def hps_files(tmp_path_factory):
    """A base-model directory (config, tokenizer, processor) and HPS-style weights in safetensors."""
    from transformers import CLIPImageProcessorPil, CLIPTokenizer

    root = tmp_path_factory.mktemp("hps")
    base = root / "base"
    base.mkdir()
    hf_config().save_pretrained(base)
    vocab = {"<|startoftext|>": VOCAB - 2, "<|endoftext|>": VOCAB - 1, "!": 0}
    for index, char in enumerate("abcdefghijklmnopqrstuvwxyz"[:VOCAB - 3]):
        vocab[char + "</w>"] = index + 1
    (root / "vocab.json").write_text(json.dumps(vocab))
    (root / "merges.txt").write_text("#version: 0.2\n")
    CLIPTokenizer(str(root / "vocab.json"), str(root / "merges.txt"), pad_token="!").save_pretrained(base)
    CLIPImageProcessorPil(size={"shortest_edge": SIZE}, crop_size={"height": SIZE, "width": SIZE}).save_pretrained(base)
    weights = root / "hps.safetensors"
    save_file(open_clip_state(), str(weights))
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
    assert (transform.longest_edge, transform.shortest_edge, transform.resampler) == (SIZE, None, "tensor")


def test_missing_or_mismatched_weights_name_the_key(hps_files, tmp_path):
    with pytest.raises(FileNotFoundError, match=r"reward.kwargs.hpsv2.weights_path=None"):
        HPSv2Reward(base_model=hps_files["base_model"])
    partial = tmp_path / "partial.safetensors"
    save_file({k: v for k, v in open_clip_state().items() if k != "visual.proj"}, str(partial))
    with pytest.raises(ValueError, match=r"reward.kwargs.hpsv21.weights_path=.*does not fit.*visual_projection"):
        HPSv21Reward(base_model=hps_files["base_model"], weights_path=str(partial))
    with pytest.raises(FileNotFoundError, match=r"reward.kwargs.hpsv2.base_model='/nowhere'"):
        HPSv2Reward(base_model="/nowhere", weights_path=hps_files["weights_path"])
