"""Model families: each a policy behind the `FlowPolicy` or `TokenPolicy` protocol (see `base.py`)
and the `FamilySpec` that says what it is (see `spec.py`)."""
