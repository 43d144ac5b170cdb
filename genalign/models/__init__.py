"""Model families: each a folder `models/<family>/` holding a policy behind the `FlowPolicy` or
`TokenPolicy` protocol (see `base.py`), the `FamilySpec` that says what it is (see `spec.py`),
its tiny builder and the files the memory plan reads; what they share sits here beside them."""
