"""A quiet console: the libraries' known chatter said once, their loading bars off off a terminal.

Where it fits: `logs.configure_console_logging` (the CLI's train, eval, serve-reward and
pretrain-demo, and the Python API's `train`) calls `quiet_libraries`. transformers and
diffusers log to their own stderr handlers (not the root logger, so not train.log); a filter
on those handlers replaces each message in `KNOWN` by one genalign line the first time it
comes (which also lands in train.log) and drops its repeats. CLIP's 77-token truncation, for
one, is logged for every batch of long prompts. Any other library message passes unchanged:
nothing unknown is hidden. Their progress bars (diffusers' "Loading pipeline components",
transformers' "Loading weights", huggingface_hub's downloads) are turned off when stderr is
not a terminal (a log file, a batch job), where each redraw is a line; in a terminal or a
Jupyter notebook they stay.
"""

from __future__ import annotations

import logging
import re
import sys
from dataclasses import dataclass

log = logging.getLogger("genalign.libraries")

LIBRARIES = ("transformers", "diffusers")


@dataclass(frozen=True)
class Known:
    name: str
    pattern: re.Pattern
    said: str
    """The one line genalign logs instead (the first time)."""


KNOWN = (
    Known(
        "torchvision fallback",
        re.compile(r"requires torchvision \(not installed\); falling back to `\w+Pil`"),
        "transformers: image processors run their PIL versions, torchvision not being installed (the same "
        "preprocessing; said once)",
    ),
    Known(
        "prompt cut to a tokenizer's window",
        re.compile(
            r"truncated because CLIP can only handle sequences up to \d+ tokens|Token indices sequence "
            r"length is longer than the specified maximum sequence length for this model"
        ),
        "transformers, diffusers: prompts longer than a text encoder's window (CLIP: 77 tokens) are cut to it; "
        "said once, not for every batch",
    ),
)
"""Library messages that repeat without telling a genalign user anything new."""


class KnownMessages(logging.Filter):
    """On a library's handler: a `KNOWN` message becomes one genalign line, once; repeats are
    counted (`counts`) and dropped; every other record passes."""

    def __init__(self) -> None:
        super().__init__("")
        self.counts: dict[str, int] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except (TypeError, ValueError):  # a malformed record is the library's business: let it through
            return True
        for known in KNOWN:
            if known.pattern.search(message):
                self.counts[known.name] = self.counts.get(known.name, 0) + 1
                if self.counts[known.name] == 1:
                    log.info("%s", known.said)
                return False
        return True


FILTER = KnownMessages()


def interactive_display() -> bool:
    """Whether progress bars render as bars here: stderr is a terminal, or a Jupyter kernel
    shows tqdm's widgets."""
    if sys.stderr is not None and sys.stderr.isatty():
        return True
    shell = sys.modules.get("IPython")
    kernel = getattr(shell, "get_ipython", lambda: None)() if shell else None
    return kernel is not None and "IPKernelApp" in getattr(kernel, "config", {})


def quiet_libraries() -> None:
    """Install `FILTER` on transformers' and diffusers' handlers (once), and turn their and
    huggingface_hub's progress bars off when they would not render as bars."""
    import diffusers.utils.logging
    import huggingface_hub.utils
    import transformers.utils.logging

    for library in (transformers.utils.logging, diffusers.utils.logging):
        library.get_logger()  # makes sure the library's own stderr handler exists
    for name in LIBRARIES:
        for handler in logging.getLogger(name).handlers:
            if FILTER not in handler.filters:
                handler.addFilter(FILTER)
    if not interactive_display():
        transformers.utils.logging.disable_progress_bar()
        diffusers.utils.logging.disable_progress_bar()
        huggingface_hub.utils.disable_progress_bars()
