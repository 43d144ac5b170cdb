"""CLIP-backed rewards (clip_score, pickscore, aesthetic) on tiny random CLIPs built from the
published open_clip architectures shrunk in width and depth (224-pixel input, 14-pixel patches,
77-token context): ViT-L/14 for clip_score and aesthetic, ViT-H/14 for PickScore, with CLIP's
real tokenizer and the published preprocessor and tokenizer configs (tests/fixtures/README.md).

The model is saved with save_pretrained and loaded back through the scorers' real loading
code; the scores are checked against values computed here independently with transformers'
PIL image processor (what Flow-GRPO's scorers run) and the model's own towers.
"""

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

from genalign.rewards.aesthetic import AestheticMLP, AestheticReward
from genalign.rewards.clip_score import ClipScoreReward
from genalign.rewards.image_transform import ImageTransform
from genalign.rewards.pickscore import PickScoreReward

PROMPTS = ["a red cat", "a blue dog", "a tree"]


@pytest.fixture(scope="module")
def clip_dir(tmp_path_factory):
    from published import save_tiny_clip

    return save_tiny_clip(tmp_path_factory.mktemp("tiny_clip"))


@pytest.fixture(scope="module")
def pickscore_dir(tmp_path_factory):
    """A tiny PickScore: open_clip's ViT-H-14 (laion's CLIP-H, which PickScore fine-tunes)."""
    from published import LAION_CLIP_H, OPEN_CLIP_VIT_H_14, save_tiny_clip

    return save_tiny_clip(tmp_path_factory.mktemp("tiny_pickscore"), OPEN_CLIP_VIT_H_14, LAION_CLIP_H, quick_gelu=None)


@pytest.fixture(scope="module")
def laion_processor_dir(tmp_path_factory, pickscore_dir):
    """PickScore's processor repository: laion CLIP-ViT-H-14's published preprocessor and
    tokenizer configs with CLIP's vocabulary, and a CLIP config.json (which the repository also
    has and AutoTokenizer reads the tokenizer class from)."""
    import shutil

    from published import LAION_CLIP_H, clip_tokenizer_files

    path = tmp_path_factory.mktemp("laion_processor")
    shutil.copy(pickscore_dir / "config.json", path / "config.json")
    clip_tokenizer_files(path, LAION_CLIP_H / "tokenizer_config.json")
    shutil.copy(LAION_CLIP_H / "preprocessor_config.json", path / "preprocessor_config.json")
    return path


@pytest.fixture(scope="module")
def images():
    generator = torch.Generator().manual_seed(1)
    return torch.randint(0, 256, (3, 3, 48, 40), generator=generator, dtype=torch.uint8)  # not square, not 32


def reference_embeddings(clip_dir, images, prompts, processor_dir=None):
    """Independent path: PIL image processor + the model's towers and projections by hand."""
    from transformers import CLIPImageProcessorPil, CLIPModel, CLIPTokenizer

    model = CLIPModel.from_pretrained(clip_dir).eval()
    processor = CLIPImageProcessorPil.from_pretrained(processor_dir or clip_dir)
    tokenizer = CLIPTokenizer.from_pretrained(processor_dir or clip_dir)
    pil_input = processor([image.permute(1, 2, 0).numpy() for image in images], return_tensors="pt")["pixel_values"]
    tokens = tokenizer(prompts, padding=True, return_tensors="pt")
    with torch.no_grad():
        image = model.visual_projection(model.vision_model(pixel_values=pil_input).pooler_output)
        text = model.text_projection(model.text_model(**tokens).pooler_output)
    return image / image.norm(dim=-1, keepdim=True), text / text.norm(dim=-1, keepdim=True), model


def test_torch_transform_is_the_pil_processor_on_the_published_config(clip_dir, images):
    from transformers import CLIPImageProcessorPil

    processor = CLIPImageProcessorPil.from_pretrained(clip_dir)
    expected = processor([image.permute(1, 2, 0).numpy() for image in images], return_tensors="pt")["pixel_values"]
    transform = ImageTransform.from_pretrained(str(clip_dir), reward="clip_score", key="processor_name")
    assert transform.shortest_edge == 224 and transform.crop_hw == (224, 224) and transform.mode == "bicubic"
    actual = transform(images)
    assert actual.shape == expected.shape == (3, 3, 224, 224)
    # Pillow's resampling reproduced exactly: only float32 normalisation round-off remains
    torch.testing.assert_close(actual, expected, atol=1e-5, rtol=0)


def test_text_is_truncated_at_the_real_77_token_context(clip_dir):
    reward = ClipScoreReward(model_name=str(clip_dir))
    assert reward.encoder.max_text_tokens == 77
    long_prompt = " ".join(["a b c d e f g h"] * 20)  # 160 words, 160 CLIP tokens: past the context
    tokens = reward.encoder.tokenizer([long_prompt], truncation=True, max_length=77)["input_ids"][0]
    assert len(tokens) == 77 and tokens[-1] == reward.encoder.tokenizer.eos_token_id  # the text tower pools there
    assert reward.score(torch.zeros(1, 3, 48, 40, dtype=torch.uint8), [long_prompt], [{}]).isfinite().all()


def test_clip_score_is_100_cos_over_30(clip_dir, images):
    image, text, _ = reference_embeddings(clip_dir, images, PROMPTS)
    scores = ClipScoreReward(model_name=str(clip_dir)).score(images, PROMPTS, [{}] * 3)
    assert scores.dtype == torch.float32 and scores.shape == (3,)
    # same pixels, same tokens, same towers: float32 round-off of the cosine, x 100 / 30
    np.testing.assert_allclose(scores.numpy(), (100 * (image * text).sum(-1) / 30).numpy(), atol=1e-4)


def test_pickscore_uses_the_learned_logit_scale_over_26(pickscore_dir, laion_processor_dir, images):
    image, text, model = reference_embeddings(pickscore_dir, images, PROMPTS, laion_processor_dir)
    reward = PickScoreReward(model_name=str(pickscore_dir), processor_name=str(laion_processor_dir))
    assert reward.encoder.tokenizer.pad_token == "<|endoftext|>"  # laion's published tokenizer config
    scores = reward.score(images, PROMPTS, [{}] * 3)
    expected = model.logit_scale.exp() * (image * text).sum(-1) / 26  # exp(3.0) = 20.09
    np.testing.assert_allclose(scores.numpy(), expected.detach().numpy(), atol=1e-4)
    reward.offload()
    reward.onload()
    assert torch.equal(reward.score(images, PROMPTS, [{}] * 3), scores)


def test_aesthetic_is_the_mlp_on_the_normalised_image_embedding(clip_dir, images, tmp_path):
    from transformers import CLIPConfig

    torch.manual_seed(2)
    head = AestheticMLP(input_size=CLIPConfig.from_pretrained(clip_dir).projection_dim).eval()  # 768 for CLIP-L
    save_file(head.state_dict(), tmp_path / "head.safetensors")
    image, _, _ = reference_embeddings(clip_dir, images, PROMPTS)
    scores = AestheticReward(model_name=str(clip_dir), head_path=str(tmp_path / "head.safetensors")).score(
        images, PROMPTS, [{}] * 3
    )
    with torch.no_grad():  # the LAION layout by hand: five linear layers, no activations
        hidden = image
        for index in (0, 2, 4, 6, 7):
            layer = head.layers[index]
            hidden = hidden @ layer.weight.T + layer.bias
    np.testing.assert_allclose(scores.numpy(), hidden.squeeze(-1).numpy(), atol=1e-4)
    assert sorted(head.state_dict())[0] == "layers.0.bias"  # key names of the original .pth


def test_missing_weights_fail_fast_with_the_key_to_set(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(FileNotFoundError, match=r"reward\.kwargs\.clip_score\.model_name='no-such/model'"):
        ClipScoreReward(model_name="no-such/model")
    with pytest.raises(ValueError, match=r"reward\.kwargs\.aesthetic\.head_path is required"):
        AestheticReward()
    with pytest.raises(FileNotFoundError, match=r"reward\.kwargs\.aesthetic\.head_path="):
        AestheticReward(head_path=str(tmp_path / "missing.safetensors"))
    with pytest.raises(TypeError, match=r"reward\.kwargs\.pickscore\.processor"):
        PickScoreReward(processor="x")


def test_image_similarity_is_the_cosine_of_result_and_source_image_embeddings(clip_dir, images, tmp_path):
    """An editing reward (needs_source): the sources come from the paths in each sample's
    metadata; the score is cos(CLIP(result), CLIP(source)), the embeddings worked out here
    independently (PIL processor, the vision tower and projection by hand)."""
    from PIL import Image

    from genalign.data.source_images import SOURCE_KEY
    from genalign.rewards.base import wants_source
    from genalign.rewards.image_similarity import ImageSimilarityReward

    paths = []
    for index, source in enumerate(images.flip(0)):  # the sources: the same images, other order
        paths.append(tmp_path / f"source_{index}.png")
        Image.fromarray(source.permute(1, 2, 0).numpy()).save(paths[-1])
    metadata = [{SOURCE_KEY: [str(path)]} for path in paths]
    reward = ImageSimilarityReward(model_name=str(clip_dir))
    assert wants_source(reward)
    scores = reward.score(images, PROMPTS, metadata)
    embeds, _, _ = reference_embeddings(clip_dir, images, PROMPTS)
    expected = (embeds * embeds.flip(0)).sum(-1)  # result b against source b = image B-1-b
    assert scores.dtype == torch.float32 and scores.shape == (3,)
    np.testing.assert_allclose(scores.numpy(), expected.numpy(), atol=1e-4)  # float32 round-off of a cosine
    assert abs(scores[1].item() - 1.0) < 1e-4  # the middle image is its own source
    with pytest.raises(Exception, match="carry no source image"):
        reward.score(images, PROMPTS, [{}] * 3)


def test_differentiable_scores_are_the_uint8_scores_and_carry_gradients(clip_dir, pickscore_dir, laion_processor_dir):
    """`score_pixels` (reward feedback) on the float pixels a uint8 image stands for: the same
    score up to the PIL path's rounding (≤ 1.15 levels after resizing, test_differentiable_transform),
    which moves these tiny models' scores by far less than 1e-3; and a gradient reaches the pixels."""
    images = torch.stack([torch.full((3, 48, 40), 60 + 40 * i, dtype=torch.uint8) for i in range(3)])
    images[:, 0, 10:30, 8:20] = 200  # a shape, not a flat field
    for reward in (
        ClipScoreReward(model_name=str(clip_dir)),
        PickScoreReward(model_name=str(pickscore_dir), processor_name=str(laion_processor_dir)),
    ):
        pixels = (images.float() / 255).requires_grad_()
        scores = reward.score_pixels(pixels, PROMPTS, [{}] * 3)
        torch.testing.assert_close(scores.detach(), reward.score(images, PROMPTS, [{}] * 3), rtol=0, atol=1e-3)
        (gradient,) = torch.autograd.grad(scores.sum(), pixels)
        assert torch.isfinite(gradient).all() and gradient.abs().sum() > 0
