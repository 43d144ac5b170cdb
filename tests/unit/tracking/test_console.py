"""A quiet console (tracking/console.py): a known library message is said once by genalign and
its repeats dropped; anything else passes; loading bars are off where they would not render."""

from __future__ import annotations

import io
import logging

import pytest

from genalign.tracking import console


@pytest.fixture
def library(monkeypatch):
    """transformers' and diffusers' loggers writing into a buffer through their own handlers,
    as they do on stderr, with the filter installed by `quiet_libraries`."""
    import diffusers.utils.logging
    import transformers.utils.logging

    stream = io.StringIO()
    monkeypatch.setattr(console, "FILTER", console.KnownMessages())
    for module in (transformers.utils.logging, diffusers.utils.logging):
        library = module.get_logger()
        # a handler of the test's own in place of the library's stderr one (which other tests'
        # imports may have replaced), formatted as transformers 5's is
        handler = logging.StreamHandler(stream)
        handler.setFormatter(logging.Formatter(f"[{library.name}] %(message)s"))
        monkeypatch.setattr(library, "handlers", [handler])
        monkeypatch.setattr(library, "propagate", False)  # as the libraries set it: the root's handlers never see it
    for handler in logging.getLogger().handlers:  # pytest's capture handlers outlive a test: a filter an
        # earlier test's `genalign` command installed on them would say the line a second time
        monkeypatch.setattr(
            handler, "filters", [f for f in handler.filters if not isinstance(f, console.KnownMessages)]
        )
    console.quiet_libraries()
    yield stream
    for name in console.LIBRARIES:
        for handler in logging.getLogger(name).handlers:
            handler.removeFilter(console.FILTER)


def test_known_library_messages_are_said_once_and_others_pass(library, caplog):
    clip = logging.getLogger("diffusers.pipelines.stable_diffusion_3.pipeline_stable_diffusion_3")
    with caplog.at_level(logging.INFO, logger="genalign"):
        for tokens in (["a"], ["b"], ["c"]):  # once per batch of long prompts, in the library
            clip.warning(
                "The following part of your input was truncated because CLIP can only handle sequences up "
                f"to 77 tokens: {tokens}"
            )
        logging.getLogger("transformers.models.auto").warning("something new the library says")
    assert library.getvalue().splitlines() == ["[transformers] something new the library says"]  # untouched
    with caplog.at_level(logging.INFO, logger="genalign"):
        logging.getLogger("transformers.tokenization_utils_base").warning(
            "Token indices sequence length is longer than the specified maximum sequence length for this model "
            "(78 > 77). Running this sequence through the model will result in indexing errors"
        )
    assert said_lines(caplog) == [console.KNOWN[1].said]  # the tokenizer's own warning is the same news
    assert console.FILTER.counts == {"prompt cut to a tokenizer's window": 4}


def said_lines(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "genalign.libraries"]


def test_loading_bars_are_off_off_a_terminal(monkeypatch):
    import diffusers.utils.logging
    import huggingface_hub.utils
    import transformers.utils.logging

    monkeypatch.setattr(console, "interactive_display", lambda: False)
    try:
        console.quiet_libraries()
        assert not transformers.utils.logging.is_progress_bar_enabled()
        assert not diffusers.utils.logging.is_progress_bar_enabled()
        assert huggingface_hub.utils.are_progress_bars_disabled()
    finally:
        transformers.utils.logging.enable_progress_bar()
        diffusers.utils.logging.enable_progress_bar()
        huggingface_hub.utils.enable_progress_bars()


TORCHAO_IMPORT_MESSAGES = {
    # as diffusers 0.42.1, torchao 0.18.0 on a CPU-only torch, and torch 2.13 word them
    "diffusers.quantizers.torchao.torchao_quantizer": "Unable to import `torchao` Tensor objects. This may affect "
    "loading checkpoints serialized with `torchao`",
    "torchao": "Failed to load /venv/lib/python3.11/site-packages/torchao/_C_cutlass_90a.abi3.so: Could not load "
    "this library: /venv/lib/python3.11/site-packages/torchao/_C_cutlass_90a.abi3.so",
    "torch.utils._pytree": "<enum 'KernelPreference'> is an Enum subclass and is now natively supported by "
    "torch.compile as an opaque value type. Calling register_constant() on Enum subclasses is deprecated and will "
    "be an error in a future release.",
}


def test_torchao_import_time_messages_are_said_once_not_printed(monkeypatch, caplog):
    """`import genalign` filters the loggers that speak while torchao is first imported (by
    diffusers' model classes, before any console is set up): each message becomes one genalign
    line; a message those loggers did not say before still passes."""
    fresh = console.KnownMessages()
    printed = io.StringIO()
    handler = logging.StreamHandler(printed)
    for name in TORCHAO_IMPORT_MESSAGES:
        logger = logging.getLogger(name)
        assert console.FILTER in logger.filters  # installed by `import genalign`
        monkeypatch.setattr(logger, "filters", [fresh])  # counts of this test's own
        monkeypatch.setattr(logger, "handlers", [handler])
        monkeypatch.setattr(logger, "propagate", False)
    with caplog.at_level(logging.INFO, logger="genalign"):
        for _ in range(2):
            for name, message in TORCHAO_IMPORT_MESSAGES.items():
                logging.getLogger(name).warning(message)
        logging.getLogger("torchao").warning("Failed to load torchao's ops: something else")
    assert printed.getvalue().splitlines() == ["Failed to load torchao's ops: something else"]
    assert said_lines(caplog) == [known.said for known in console.KNOWN[2:]]
    assert set(fresh.counts.values()) == {2}
