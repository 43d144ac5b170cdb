"""The "toy" model family: a tiny SD3 transformer in 32x32 RGB pixel space (the CPU demo).

The family's folder, as every family's (docs/extending.md §3): `policy.py` holds `ToyPolicy`
and its `SPEC` (what `models/registry.py` names), `network.py` builds and loads its parts,
`pretrain.py` is the recipe that made its shipped weights, `architectures/` and
`calibration.json` describe it to the memory plan. Its weights ship (`model.path=builtin`,
`genalign/assets/toy/`, beside the shape classifiers that `genalign pretrain-demo` writes with
them), so it needs no tiny builder. What the demo keeps elsewhere, and why: the shapes world
both the model and the rewards read (`data/toy_shapes.py`, below both), its rewards
(`rewards/toy.py`, `rewards/toy_classifier.py`: a reward never imports a model family), and
the command that regenerates model and classifiers together (`demo/pretrain.py`, above both).
"""

from genalign.models.toy.policy import SPEC, ToyPolicy

__all__ = ["SPEC", "ToyPolicy"]
