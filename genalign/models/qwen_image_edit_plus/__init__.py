"""Qwen-Image-Edit-Plus (Qwen-Image-Edit-2509 and -2511): multi-image editing, the family's folder
(docs/extending.md §3).

`policy.py` holds `QwenImageEditPlusPolicy` and its `SPEC` (what `models/registry.py` names),
`tiny.py` the tiny random `QwenImageEditPlusPipeline` of each checkpoint, `architectures/` the
configs of the checkpoints it loads and `calibration.json` its activation bytes per token.
"""

from genalign.models.qwen_image_edit_plus.policy import SPEC, QwenImageEditPlusPolicy

__all__ = ["QwenImageEditPlusPolicy", "SPEC"]
