"""FLUX.2 [dev]: the family's folder (docs/extending.md §3).

`policy.py` holds `Flux2Policy` (FLUX.2 [klein]'s policy with the Mistral3 text encoder and the
guidance embedding) and its `SPEC` (what `models/registry.py` names), `tiny.py` the tiny random
`Flux2Pipeline` the default suite builds from the published configs shrunk,
`mistral3_chat_template.jinja` the text encoder's chat template the tiny processor carries,
`architectures/` the published configs of the checkpoint it loads and `calibration.json` its
activation bytes per token (both read by the memory plan through `SPEC`).
"""

from genalign.models.flux2.policy import SPEC, Flux2Policy

__all__ = ["Flux2Policy", "SPEC"]
