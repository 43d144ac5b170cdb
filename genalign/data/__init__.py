"""Prompt manifests and the per-step prompt sampler."""
