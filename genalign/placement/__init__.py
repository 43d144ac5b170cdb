"""Placement: which devices and Ray resources each role gets (`resources.py`, `config.py`),
the Ray actor pools (`ray_pools.py`), the CUDA device helpers (`devices.py`) and the torchrun
launcher (`launch.py`)."""
