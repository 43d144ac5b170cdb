"""Fixed-prompt, fixed-seed evaluation and contact sheets."""
