"""Run reports: `report.html`, one self-contained page per run directory (see report.py)."""
