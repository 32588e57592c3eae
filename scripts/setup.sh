#!/usr/bin/env bash
# Set up everything vinlens needs on a fresh Debian machine, idempotently:
# a .venv with torch 2.13.0 (CPU) installed first, vinlens with its dev extras,
# the npm packages and the esbuild bundle, and Debian's Chromium for browser tests.
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  echo "[setup] creating .venv"
  "$PY" -m venv .venv
fi
VPY=.venv/bin/python

if ! "$VPY" -c 'import torch, sys; sys.exit(0 if torch.__version__.startswith("2.13.0") else 1)' 2>/dev/null; then
  echo "[setup] installing torch==2.13.0 (CPU wheel) first"
  "$VPY" -m pip install --quiet --upgrade pip
  "$VPY" -m pip install --quiet torch==2.13.0
fi

if [ ! -d node_modules/esbuild ] || [ package.json -nt node_modules/.package-lock.json ]; then
  echo "[setup] npm install"
  if [ -f package-lock.json ]; then npm ci --no-audit --no-fund; else npm install --no-audit --no-fund; fi
fi
echo "[setup] building the widget bundle"
npm run --silent build

echo "[setup] installing vinlens (editable) with dev extras"
"$VPY" -m pip install --quiet -e ".[dev]"

if [ ! -x /usr/bin/chromium ] && [ "${VINLENS_SKIP_CHROMIUM:-0}" != "1" ]; then
  echo "[setup] installing Debian's chromium for the browser tests"
  SUDO=""
  [ "$(id -u)" = "0" ] || SUDO="sudo"
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q chromium
fi
echo "[setup] done"
