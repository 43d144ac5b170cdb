"""The "toy" model family: a tiny SD3 transformer in 32x32 RGB pixel space (the CPU demo).

The family's folder, as every family's (docs/extending.md §3): `policy.py` holds `ToyPolicy`
and its `SPEC` (what `models/registry.py` names), `network.py` builds and loads its parts,
`architectures/` and `calibration.json` describe it to the memory plan. Its weights are the
shipped ones (`model.path=builtin`, `genalign/assets/toy/`), so it needs no tiny builder.
"""

from genalign.models.toy.policy import SPEC, ToyPolicy

__all__ = ["SPEC", "ToyPolicy"]
