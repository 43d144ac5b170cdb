"""Weights: what is trained and the copies kept of it.

LoRA adapters and the trainable state (`lora.py`), float32 shadow copies (`shadow.py`), the
frozen reference policy (`reference.py`) and copies into sharded tensors (`sharded.py`). Used
by the rollout workers, the algorithms and the trainer alike, so it sits below all three.
"""
