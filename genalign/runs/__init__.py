"""Runs: what a run leaves on disk and how it starts and stops.

The run-directory rules (`run_dir.py`: fresh, resume, refuse), atomic checkpoints
(`checkpoint.py`) and stopping on a signal or a stall (`stopping.py`).
"""
