#!/usr/bin/env bash
# Set up everything vinlens needs on a fresh Debian machine, idempotently:
# a .venv with torch 2.13.0 (CPU) installed first, vinlens with its dev extras,
# the npm packages and the esbuild bundle, and (through apt, with sudo when not root)
# Debian's Chromium and two font packages for the browser tests.
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

# The browser tests need the browser and fonts for legible screenshots, nothing more:
# without --no-install-recommends apt pulls in ~115 packages (~480 MB) and upgrades
# unrelated system libraries. Headless Chromium brings its own software renderer.
BROWSER_PACKAGES="chromium fonts-dejavu-core fonts-liberation"
missing=""
for pkg in $BROWSER_PACKAGES; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing="$missing $pkg"
done
if [ -n "$missing" ] && [ "${VINLENS_SKIP_CHROMIUM:-0}" != "1" ]; then
  echo "[setup] installing with apt (sudo when not root):$missing"
  SUDO=""
  [ "$(id -u)" = "0" ] || SUDO="sudo"
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends $missing
fi
echo "[setup] done"
