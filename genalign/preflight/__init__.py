"""Preflight: every check a run passes before anything is built.

The checks across keys (`validate.py`, `values.py`, `algorithm_checks.py`), of the files,
checkpoint and run directory a config names (`files.py`), of this machine (GPU placement,
`memory_plan.py`), the derived sizes (`plan.py`) and the warnings about valid but surprising
settings (`cautions.py`). `load.py` is the entry point: compose the config (config/loader.py),
then run the checks. It sits above the registries it checks names against.
"""
