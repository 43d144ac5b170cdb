"""FLUX.2 [klein] (4B, 9B; the -base teachers): the family's folder (docs/extending.md §3).

`policy.py` holds `Flux2KleinPolicy` and its `SPEC` (what `models/registry.py` names), `tiny.py`
the tiny random `Flux2KleinPipeline` the default suite builds from the published configs
shrunk, `qwen3_chat_template.jinja` the text encoder's chat template the tiny tokenizer carries,
`architectures/` the published configs of the checkpoints it loads and `calibration.json` its
activation bytes per token (both read by the memory plan through `SPEC`).
"""

from genalign.models.flux2_klein.policy import SPEC, Flux2KleinPolicy

__all__ = ["Flux2KleinPolicy", "SPEC"]
