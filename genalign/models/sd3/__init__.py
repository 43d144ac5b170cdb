"""Stable Diffusion 3 / 3.5: the family's folder (docs/extending.md §3).

`policy.py` holds `SD3Policy` and its `SPEC` (what `models/registry.py` names), `tiny.py` the tiny
random model the default suite builds from configs, `architectures/` the published configs of
the checkpoints it loads and `calibration.json` its activation bytes per token (both read by
the memory plan through `SPEC`).
"""

from genalign.models.sd3.policy import SD3_LORA_TARGETS, SD3_REPEATED_BLOCKS, SPEC, SD3Policy, sd3_transformer_velocity

__all__ = ["SD3_LORA_TARGETS", "SD3_REPEATED_BLOCKS", "SD3Policy", "SPEC", "sd3_transformer_velocity"]
