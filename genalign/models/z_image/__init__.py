"""Z-Image (Turbo and base): the family's folder (docs/extending.md §3).

`policy.py` holds `ZImagePolicy` and its `SPEC` (what `models/registry.py` names), `tiny.py` the
tiny random model built from the published configs shrunk, `architectures/` those configs of the
checkpoints it loads and `calibration.json` its activation bytes per token (both read by the
memory plan through `SPEC`).
"""

from genalign.models.z_image.policy import SPEC, ZImagePolicy

__all__ = ["SPEC", "ZImagePolicy"]
