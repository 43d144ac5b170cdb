"""Rewards: scorers (one module each), weighted composition, local/Ray runtime."""
