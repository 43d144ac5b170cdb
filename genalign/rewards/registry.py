"""Scorers by short name (`reward.components.<name>`, `eval.gold_rewards.<name>`)."""

from genalign.config.registry import Registry

REWARDS = Registry("reward", "reward.components")
REWARDS.register("ocr", "genalign.rewards.ocr:OCRReward")
REWARDS.register("jpeg_compressibility", "genalign.rewards.jpeg:JpegCompressibility")
REWARDS.register("jpeg_incompressibility", "genalign.rewards.jpeg:JpegIncompressibility")
REWARDS.register("aesthetic", "genalign.rewards.aesthetic:AestheticReward")
REWARDS.register("clip_score", "genalign.rewards.clip_score:ClipScoreReward")
REWARDS.register("pickscore", "genalign.rewards.pickscore:PickScoreReward")
REWARDS.register("text_similarity", "genalign.rewards.text_similarity:TextSimilarityReward")
REWARDS.register("random", "genalign.rewards.random_reward:RandomReward")
REWARDS.register("toy_shape", "genalign.rewards.toy:ToyShapeReward")
REWARDS.register("toy_shape_judge", "genalign.rewards.toy:ToyShapeJudgeReward")
REWARDS.register("toy_color_area", "genalign.rewards.toy:ToyColorAreaReward")
