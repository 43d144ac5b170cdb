#!/usr/bin/env bash
# Fresh-machine set-up: a Python 3.11 virtualenv in .venv with genalign, the extras the test
# suite uses (dev = ocr, text-similarity, trackers, pytest), at the tested versions of
# requirements/constraints.txt. torch goes first, constrained to the tested CPU build: an
# unconstrained torch resolves to a multi-GB CUDA build.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3.11}
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet -c requirements/constraints.txt torch
.venv/bin/python -m pip install --quiet -c requirements/constraints.txt -e ".[dev]"
