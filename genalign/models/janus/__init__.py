"""Janus-Pro (token-autoregressive): the family's folder (docs/extending.md §3).

`policy.py` holds `JanusPolicy` and its `SPEC` (what `models/registry.py` names), `tiny.py` the tiny
random model the default suite builds from configs, `architectures/` the published configs of
the checkpoints it loads and `calibration.json` its activation bytes per token (both read by
the memory plan through `SPEC`).
"""

from genalign.models.janus.policy import SPEC, JanusPolicy

__all__ = ["JanusPolicy", "SPEC"]
