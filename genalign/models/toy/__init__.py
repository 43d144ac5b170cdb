"""The "toy" model family: a tiny SD3 transformer in 32x32 RGB pixel space (the CPU demo).

`policy.ToyPolicy` is the FlowPolicy; `network` builds and loads its parts; `pretrain`
regenerates the shipped weights in `genalign/assets/toy/` (`genalign pretrain-demo`).
"""
