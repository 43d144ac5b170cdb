"""Qwen-Image-Edit: instruction editing, the family's folder (docs/extending.md §3).

`policy.py` holds `QwenImageEditPolicy` and its `SPEC` (what `models/registry.py` names), `tiny.py`
the tiny random `QwenImageEditPipeline` (and the components Qwen-Image-Edit-Plus's shares),
`architectures/` the configs of the checkpoint it loads and `calibration.json` its activation
bytes per token (both read by the memory plan through `SPEC`).
"""

from genalign.models.qwen_image_edit.policy import SPEC, QwenImageEditPolicy

__all__ = ["QwenImageEditPolicy", "SPEC"]
