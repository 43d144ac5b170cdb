"""The per-step console line prints only what the step's algorithm produced."""

from genalign.tracking.logs import console_summary


def test_grpo_step_prints_reward_loss_clip_and_kl():
    row = {"reward_mean": 0.51234, "loss": -0.0123, "clip_frac": 0.25, "kl": 0.002}
    assert console_summary(row) == "reward 0.5123  loss -0.0123  clip 0.250  kl 0.002"


def test_nft_and_dpo_steps_print_no_clip_and_offline_dpo_no_reward():
    nft = {"reward_mean": 0.5, "loss": 0.3, "kl": 0.0, "nft_optimality": 0.5}
    assert console_summary(nft) == "reward 0.5000  loss 0.3  kl 0"
    offline_dpo = {"loss": 0.642, "dpo_implicit_accuracy": 0.5, "pairs": 2}
    assert console_summary(offline_dpo) == "loss 0.642"
    assert "nan" not in console_summary({"loss": 0.1, "clip_frac": float("nan")})
