"""genalign: reinforcement-learning post-training for visual generative models.

Where it fits: this package is the whole framework; `genalign.cli` is the command line
(`genalign train | config | eval | report | ...`) and these names are the Python API
(`genalign/api.py`, docs/running.md#python-api):

    from genalign import load_config, train, Trainer, TrainerCallback

They are imported on first use, so `import genalign` (and `import genalign.config`) stays
light. Read docs/architecture.md for the map of the parts.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from genalign.tracking.console import quiet_import_time_messages
from genalign.version import __version__

quiet_import_time_messages()  # before anything imports diffusers (which imports torchao when installed)

if TYPE_CHECKING:
    from genalign.api import Trainer, TrainerCallback, TrainResult, load_config, train

__all__ = ["__version__", "load_config", "train", "Trainer", "TrainerCallback", "TrainResult"]
API = tuple(__all__[1:])


def __getattr__(name: str) -> Any:
    """The API names, imported when first asked for (PEP 562)."""
    if name in API:
        from genalign import api  # lazy: PEP 562, so `import genalign` stays light (no torch)

        return getattr(api, name)
    raise AttributeError(f"module 'genalign' has no attribute {name!r}")
