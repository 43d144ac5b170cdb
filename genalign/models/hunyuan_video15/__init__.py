"""HunyuanVideo 1.5 text-to-video: the family's folder (docs/extending.md §3).

`policy.py` holds `HunyuanVideo15Policy` and its `SPEC` (what `models/registry.py` names),
`tiny.py` the tiny random model the default suite builds from the published configs,
`architectures/` those configs and `calibration.json` its activation bytes per token (both
read by the memory plan through `SPEC`).
"""

from genalign.models.hunyuan_video15.policy import SPEC, HunyuanVideo15Policy

__all__ = ["SPEC", "HunyuanVideo15Policy"]
