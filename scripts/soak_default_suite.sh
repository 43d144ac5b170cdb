#!/usr/bin/env bash
# Run the default suite RUNS times in a row and log each result (the load check behind docs/testing.md's figures).
# Start two at once (e.g. `scripts/soak_default_suite.sh A 5 & scripts/soak_default_suite.sh B 5`)
# so that each run has a CPU-bound process beside it; results go to /tmp/soak-summary.txt.
set -u
name=${1:?usage: soak_default_suite.sh NAME RUNS}; runs=${2:?usage: soak_default_suite.sh NAME RUNS}
cd "$(dirname "$0")/.."
export OMP_NUM_THREADS=1
for i in $(seq 1 "$runs"); do
  start=$(date +%s)
  # a --basetemp per run: two pytest sessions must not prune each other's numbered temp dirs
  timeout 3600 .venv/bin/python -m pytest -q --basetemp="/tmp/soak-$name-$i" > "/tmp/soak-$name-$i.log" 2>&1
  rc=$?
  echo "$name run $i: rc=$rc $(( $(date +%s) - start ))s $(tail -1 "/tmp/soak-$name-$i.log")" >> /tmp/soak-summary.txt
  rm -rf "/tmp/soak-$name-$i"
done
