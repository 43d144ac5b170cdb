"""Training: the thin loop, one optimizer round, LoRA, EMA, checkpoints, distribution."""
