#!/usr/bin/env bash
# Fresh-machine set-up: a Python 3.11 virtualenv in .venv with genalign and its test extras.
# torch is pinned and installed first: an unpinned torch resolves to a multi-GB CUDA build.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3.11}
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet "torch==2.13.0"
.venv/bin/python -m pip install --quiet -e ".[dev]"
