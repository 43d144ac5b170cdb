"""Model families behind the `FlowPolicy` protocol (see `base.py`)."""
