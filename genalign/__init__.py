"""genalign: reinforcement-learning post-training for visual generative models.

Where it fits: this package is the whole framework; `genalign.cli` is the entry point
(`genalign train | config | eval | report`). Read docs/architecture.md for the map of the parts.
"""

__version__ = "0.1.0"
