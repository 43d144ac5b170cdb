"""Rollout: prompts -> trajectories (latents, per-step log-probs, decoded images)."""
