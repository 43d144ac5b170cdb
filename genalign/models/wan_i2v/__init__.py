"""Wan image-to-video (Wan 2.1 I2V 480P / 720P, Wan 2.2 I2V-A14B, Wan 2.2 TI2V-5B): the family's folder
(docs/extending.md §3).

`policy.py` holds `WanI2VPolicy` and its `SPEC` (what `models/registry.py` names), `tiny.py` the
tiny random models the default suite builds from configs, `architectures/` the configs of the
checkpoints it loads and `calibration.json` its activation bytes per token (both read by the
memory plan through `SPEC`).
"""

from genalign.models.wan_i2v.policy import SPEC, WanI2VPolicy

__all__ = ["SPEC", "WanI2VPolicy"]
