#!/usr/bin/env bash
# Prepare, on a machine with a package registry, what the GPU suite (benchmarks/gpu_suite.py)
# needs that the GPU machine's image lacks; nothing is fetched on the GPU machine. One command:
#
#   bash benchmarks/prepare_gpu.sh [FLOW_GRPO_GIT_DIR]
#
# 1. .whl/: the wheels to install there with pip --no-index --no-deps --target (pure Python,
#    or built for CPython 3.12 on manylinux x86_64): diffusers and what it and genalign import
#    beyond an image of torch 2.11 + transformers + peft + accelerate (WHEELS below; EXTRA_WHEELS
#    adds more, e.g. EXTRA_WHEELS="huggingface_hub==1.40.0" if the image's hub is older than
#    diffusers needs), and what Flow-GRPO's loop imports beyond those (absl-py, ml_collections).
# 2. .flow_grpo/: Flow-GRPO's own files the reference loop runs (scripts/train_sd3.py,
#    config/base.py, flow_grpo/*.py and its prompt lists, LICENSE) exactly as they are at FLOW_GRPO_COMMIT, copied
#    from a git checkout of github.com/yifan123/flow_grpo: the first argument, or
#    $FLOW_GRPO_GIT, or where a session's `fetch github:yifan123/flow_grpo` puts it. Without
#    one the script stops (NO_REFERENCE=1 prepares the wheels alone; the suite then marks the
#    reference comparison skipped).
# 3. .gpu_prepared.json: what was prepared (wheels, reference commit, genalign commit).
# 4. A check that the set is complete (benchmarks/check_carried.py), when .venv exists.
#
# Both folders are ignored by git (.gitignore) and travel as carried paths: docs/benchmarks.md
# ("GPU suite") gives the one command the GPU machine runs.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
WHEELS=(diffusers==0.42.1 pillow==13.0.0 requests==2.34.2 urllib3==2.8.0 charset-normalizer==3.5.3 certifi==2026.10.19.post1 idna==3.20
        omegaconf==2.4.0 imageio==2.38.1 torchvision==0.26.0 absl-py==2.5.1 ml_collections==1.1.0
        ftfy==6.3.1 wcwidth==0.9.4 torchao==0.18.0)
# ftfy: WanImageToVideoPipeline cleans prompts with it unconditionally (NameError without it)
# torchvision 0.26.0 is the build for torch 2.11 (the image's): Cosmos-Predict2.5's real transformer needs it
# torchao 0.18.0 (model.float8, the compiled_float8 lever): built for torch >= 2.11, so on the image
# it loads its C++ extensions; float8 training itself is Python over torch._scaled_mm
FLOW_GRPO_COMMIT=${FLOW_GRPO_COMMIT:-ac4c86e8cae021841f1fde853d340e0db67690dd}
FLOW_GRPO_FILES=(LICENSE scripts/train_sd3.py config/base.py flow_grpo/diffusers_patch flow_grpo/ema.py
                 flow_grpo/prompts.py flow_grpo/rewards.py flow_grpo/stat_tracking.py)

rm -rf .whl && mkdir -p .whl
# shellcheck disable=SC2086
"$PYTHON" -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  -d .whl "${WHEELS[@]}" ${EXTRA_WHEELS:-}
echo "wheels: $(ls .whl | tr '\n' ' ')($(du -sh .whl | cut -f1))"

reference=null
if [ "${NO_REFERENCE:-0}" != 1 ]; then
  src=${1:-${FLOW_GRPO_GIT:-/work/.mirror/yifan123+flow_grpo/repo}}
  if ! git --git-dir="$src" rev-parse --quiet --verify "$FLOW_GRPO_COMMIT^{commit}" >/dev/null 2>&1 &&
     ! git --git-dir="$src/.git" rev-parse --quiet --verify "$FLOW_GRPO_COMMIT^{commit}" >/dev/null 2>&1; then
    echo "prepare_gpu.sh: no git checkout of github.com/yifan123/flow_grpo holding commit $FLOW_GRPO_COMMIT at" \
         "'$src' (give its path as the first argument or FLOW_GRPO_GIT; NO_REFERENCE=1 skips the reference)" >&2
    exit 1
  fi
  [ -d "$src/.git" ] && src="$src/.git"
  rm -rf .flow_grpo && mkdir -p .flow_grpo
  # flow_grpo/assets: its prompt lists (prompts.py resolves the package on import), not the aesthetic model's pickle
  git --git-dir="$src" ls-tree -r --name-only "$FLOW_GRPO_COMMIT" -- "${FLOW_GRPO_FILES[@]}" flow_grpo/assets |
    grep -v '\.pth$' | while read -r path; do
    mkdir -p ".flow_grpo/$(dirname "$path")"
    git --git-dir="$src" show "$FLOW_GRPO_COMMIT:$path" > ".flow_grpo/$path"
  done
  echo "$FLOW_GRPO_COMMIT" > .flow_grpo/COMMIT
  reference="\"$FLOW_GRPO_COMMIT\""
  echo "reference: Flow-GRPO $FLOW_GRPO_COMMIT ($(find .flow_grpo -name '*.py' | wc -l) Python files, $(du -sh .flow_grpo | cut -f1))"
fi
commit=$(git rev-parse HEAD 2>/dev/null || echo unknown)
printf '{"wheels": [%s], "flow_grpo_commit": %s, "genalign_commit": "%s"}\n' \
  "$(ls .whl | sed 's/.*/"&"/' | paste -sd, -)" "$reference" "$commit" > .gpu_prepared.json
echo "prepared: .whl .flow_grpo .gpu_prepared.json ($(du -csh .whl .flow_grpo 2>/dev/null | tail -1 | cut -f1) to carry)"
# 4. Prove the set complete: the tiny suite in a Python that imports only the image's packages
#    and these wheels (benchmarks/check_carried.py; CHECK=0 skips it).
if [ "${CHECK:-1}" = 1 ] && [ -x .venv/bin/python ]; then
  .venv/bin/python benchmarks/check_carried.py | tail -3
fi
