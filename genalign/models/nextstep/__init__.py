"""NextStep-1 (stepfun-ai): a Qwen2.5 decoder with a flow-matching head for continuous image
tokens (policy.py; the model in modeling.py, the head in head.py, the sampler in sampling.py)."""

from genalign.models.nextstep.policy import SPEC, NextStepPolicy

__all__ = ["SPEC", "NextStepPolicy"]
