"""Scorers by short name (`reward.components.<name>`, `eval.gold_rewards.<name>`), and the
options dataclass each one parses its `reward.kwargs.<name>` with (so a typo or a bad value
is a config error before anything loads, not a TypeError when the scorer is built)."""

from genalign.config.registry import Registry

REWARDS = Registry("reward", "reward.components", dotted_key="reward.allow_import")
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
REWARDS.register("toy_off_shape_fraction", "genalign.rewards.toy:ToyOffShapeFraction")
REWARDS.register("toy_background_deviation", "genalign.rewards.toy:ToyBackgroundDeviation")
REWARDS.register("toy_shape_area", "genalign.rewards.toy:ToyShapeArea")
REWARDS.register("toy_patch_pattern", "genalign.rewards.toy:ToyPatchPattern")
REWARDS.register("temporal_consistency", "genalign.rewards.video:TemporalConsistencyReward")
REWARDS.register("vlm_judge", "genalign.rewards.vlm_judge:VlmJudgeReward")
REWARDS.register("hpsv2", "genalign.rewards.hps:HPSv2Reward")
REWARDS.register("hpsv21", "genalign.rewards.hps:HPSv21Reward")
REWARDS.register("image_reward", "genalign.rewards.image_reward:ImageRewardReward")
REWARDS.register("geneval", "genalign.rewards.geneval:GenEvalReward")
REWARDS.register("geneval_accuracy", "genalign.rewards.geneval:GenEvalAccuracyReward")
REWARDS.register("image_similarity", "genalign.rewards.image_similarity:ImageSimilarityReward")

REWARD_OPTIONS = {
    "ocr": "genalign.rewards.ocr:OCROptions",
    "jpeg_compressibility": "genalign.rewards.jpeg:JpegOptions",
    "jpeg_incompressibility": "genalign.rewards.jpeg:JpegOptions",
    "aesthetic": "genalign.rewards.aesthetic:AestheticOptions",
    "clip_score": "genalign.rewards.clip_score:ClipScoreOptions",
    "pickscore": "genalign.rewards.pickscore:PickScoreOptions",
    "text_similarity": "genalign.rewards.text_similarity:TextSimilarityOptions",
    "random": "genalign.rewards.random_reward:RandomOptions",
    "toy_shape": "genalign.rewards.toy:ToyShapeOptions",
    "toy_shape_judge": "genalign.rewards.toy:ToyShapeOptions",
    "toy_color_area": "genalign.rewards.toy:ToyColorAreaOptions",
    "toy_off_shape_fraction": "genalign.rewards.toy:NoOptions",
    "toy_background_deviation": "genalign.rewards.toy:NoOptions",
    "toy_shape_area": "genalign.rewards.toy:NoOptions",
    "toy_patch_pattern": "genalign.rewards.toy:NoOptions",
    "temporal_consistency": "genalign.rewards.video:TemporalConsistencyOptions",
    "vlm_judge": "genalign.rewards.vlm_judge:VlmJudgeOptions",
    "hpsv2": "genalign.rewards.hps:HPSOptions",
    "hpsv21": "genalign.rewards.hps:HPSOptions",
    "image_reward": "genalign.rewards.image_reward:ImageRewardOptions",
    "geneval": "genalign.rewards.geneval:GenEvalOptions",
    "geneval_accuracy": "genalign.rewards.geneval:GenEvalOptions",
    "image_similarity": "genalign.rewards.image_similarity:ImageSimilarityOptions",
}
"""Registered reward -> "module:OptionsClass" (the dataclass its constructor passes to
`parse_options`); a dotted-path reward's options are its own business."""
