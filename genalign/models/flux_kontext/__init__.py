"""FLUX.1 Kontext (dev): instruction editing, the family's folder (docs/extending.md §3).

`policy.py` holds `FluxKontextPolicy` and its `SPEC` (what `models/registry.py` names), `tiny.py`
the tiny random `FluxKontextPipeline` the default suite builds, `architectures/` the configs of
the checkpoint it loads and `calibration.json` its activation bytes per token (both read by the
memory plan through `SPEC`).
"""

from genalign.models.flux_kontext.policy import SPEC, FluxKontextPolicy

__all__ = ["FluxKontextPolicy", "SPEC"]
