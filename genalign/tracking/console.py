"""A quiet console: the libraries' known chatter said once, their loading bars off off a terminal.

Where it fits: `logs.configure_console_logging` (the CLI's train, eval, serve-reward and
pretrain-demo, and the Python API's `train`) calls `quiet_libraries`. transformers and
diffusers log to their own stderr handlers (not the root logger, so not train.log); a filter
on those handlers replaces each message in `KNOWN` by one genalign line the first time it
comes (which also lands in train.log) and drops its repeats. CLIP's 77-token truncation, for
one, is logged for every batch of long prompts. Any other library message passes unchanged:
nothing unknown is hidden. A few messages come once, at import time, from where no handler
is ours yet (torchao's, when it is installed: `IMPORT_TIME_LOGGERS`); `import genalign` puts the
same filter on those loggers. Their progress bars (diffusers' "Loading pipeline components",
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
    Known(
        "diffusers without torchao's old types",
        re.compile(r"Unable to import `torchao` Tensor objects"),
        "diffusers: its loader of torchao-quantized checkpoints finds none of the torchao types it expects in "
        "this torchao (genalign[float8]); genalign loads no such checkpoint, and model.float8 does not use it",
    ),
    Known(
        "torchao's CUDA kernels on a CPU-only torch",
        re.compile(r"Failed to load \S*torchao\S*\.so: Could not load this library"),
        "torchao: its compiled CUDA kernels do not load with this torch (a CPU-only build, or one older than "
        "torchao's); model.float8 needs none of them (torch._scaled_mm does the float8 matmuls)",
    ),
    Known(
        "torchao's enums registered with torch's pytree",
        re.compile(r"<enum '\w+'> is an Enum subclass and is now natively supported by torch.compile"),
        "torch: a library (torchao) registers its enums with torch.compile in the older way, which this torch "
        "still accepts",
    ),
)
"""Library messages that repeat without telling a genalign user anything new."""
IMPORT_TIME_LOGGERS = ("diffusers.quantizers.torchao.torchao_quantizer", "torchao", "torch.utils._pytree")
"""Where the torchao messages in `KNOWN` come from: each is logged once, when its module is first
imported (diffusers imports torchao with its model classes whenever torchao is installed), which
is before any console is configured; `quiet_import_time_messages` filters these loggers
themselves, which needs no import of them."""


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


def quiet_import_time_messages() -> None:
    """Put `FILTER` on the loggers of `IMPORT_TIME_LOGGERS` (once): `import genalign` calls it,
    so it runs before any genalign module imports diffusers or torch."""
    for name in IMPORT_TIME_LOGGERS:
        logger = logging.getLogger(name)
        if FILTER not in logger.filters:
            logger.addFilter(FILTER)


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
