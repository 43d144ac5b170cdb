"""The GenEval and VLM-judge recipes: Flow-GRPO's geneval_sd3 / pickscore_sd3 numbers as one global batch."""

from genalign.preflight.load import load_config

GENEVAL = "experiment/diffusion/sd3_5/online_grpo_geneval"
JUDGE = "experiment/diffusion/sd3_5/online_grpo_vlm_judge"


def test_geneval_recipe_matches_flow_grpo_geneval_sd3():
    cfg = load_config(GENEVAL)
    samples = cfg.rollout.n * cfg.rollout.rollout_batch_size
    # Flow-GRPO: 32 GPUs x 9 images x 4 batches = 48 prompts x 24 images; 2 updates per epoch
    assert (cfg.rollout.n, cfg.rollout.rollout_batch_size, samples) == (24, 48, 1152)
    micro_batches = samples // cfg.rollout.sample_batch_size
    assert cfg.rollout.sample_batch_size == 9 and micro_batches // cfg.actor.gradient_accumulation_steps == 2
    assert (cfg.rollout.num_steps, cfg.rollout.guidance_scale, cfg.rollout.noise_level) == (10, 4.5, 0.7)
    assert (cfg.rollout.height, cfg.rollout.width) == (512, 512)
    assert (cfg.algorithm.kl_beta, cfg.algorithm.timestep_fraction, cfg.algorithm.clip_range) == (0.04, 0.99, 1e-4)
    assert cfg.actor.lr == 3e-4 and cfg.actor.ema.enabled and cfg.eval.use_ema
    assert (cfg.eval.every, cfg.eval.num_steps, cfg.eval.batch_size, cfg.eval.max_prompts) == (60, 40, 14, 2212)
    assert cfg.reward.components == {"geneval": 1.0} and cfg.eval.gold_rewards == {"geneval_accuracy": 1.0}
    assert cfg.data.manifest.endswith("geneval/train.jsonl")


def test_vlm_judge_recipe():
    cfg = load_config(JUDGE, ["reward.kwargs.vlm_judge.base_url=http://10.0.0.7:17140/v1"])
    assert cfg.reward.components == {"vlm_judge": 1.0} and cfg.algorithm.kl_beta == 0.01
    assert cfg.reward.kwargs["vlm_judge"] == {"base_url": "http://10.0.0.7:17140/v1", "model": "UnifiedReward-7b-v1.5"}


def test_hpsv21_recipe():
    cfg = load_config("experiment/diffusion/sd3_5/online_grpo_hpsv21", ["reward.kwargs.hpsv21.weights_path=/m/h.st"])
    assert cfg.reward.components == {"hpsv21": 1.0} and cfg.algorithm.kl_beta == 0.01
    assert cfg.reward.kwargs["hpsv21"] == {"weights_path": "/m/h.st"}
    assert (cfg.rollout.n, cfg.rollout.rollout_batch_size) == (24, 48)


def test_image_reward_recipe():
    cfg = load_config(
        "experiment/diffusion/sd3_5/online_grpo_image_reward", ["reward.kwargs.image_reward.weights_path=/m/ir.st"]
    )
    assert cfg.reward.components == {"image_reward": 1.0} and cfg.algorithm.kl_beta == 0.01
    assert cfg.reward.kwargs["image_reward"] == {"weights_path": "/m/ir.st"}


def test_missing_reward_weights_are_reported_before_loading(tmp_path):
    from genalign.preflight.files import file_problems

    cfg = load_config(GENEVAL, [f"trainer.output_dir={tmp_path / 'run'}"])
    problems = "\n".join(file_problems(cfg))  # the suite runs with HF_HUB_OFFLINE=1 and an empty cache
    assert "reward.kwargs.geneval.detector_name='facebook/mask2former-swin-small-coco-instance'" in problems
    assert "reward.kwargs.geneval_accuracy.clip_name='openai/clip-vit-large-patch14'" in problems
    cfg = load_config(
        "experiment/diffusion/sd3_5/online_grpo_hpsv21",
        [f"trainer.output_dir={tmp_path / 'run'}", "reward.kwargs.hpsv21.weights_path=/no/hps.st"],
    )
    assert "reward.kwargs.hpsv21.weights_path: /no/hps.st does not exist" in file_problems(cfg)
