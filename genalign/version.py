"""genalign's version (what `genalign --version` prints and the wheel is built as)."""

__version__ = "0.1.0"
