"""HunyuanVideo 1.5 image-to-video: the family's folder (docs/extending.md §3).

`policy.py` holds `HunyuanVideo15I2VPolicy` (the text-to-video policy plus the first frame) and
its `SPEC` (what `models/registry.py` names), `tiny.py` the tiny random model the default suite
builds from the published configs, `architectures/` those configs and `calibration.json` its
activation bytes per token (both read by the memory plan through `SPEC`).
"""

from genalign.models.hunyuan_video15_i2v.policy import SPEC, HunyuanVideo15I2VPolicy

__all__ = ["SPEC", "HunyuanVideo15I2VPolicy"]
