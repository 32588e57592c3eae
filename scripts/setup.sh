#!/usr/bin/env bash
# Set up everything vinlens needs on a fresh Debian machine, idempotently:
# a .venv with torch 2.13.0 (CPU) installed first, vinlens with its dev extras,
# the npm packages and the esbuild bundle, and (through apt, with sudo when not root)
# Debian's Chromium and two font packages for the browser tests.
set -euo pipefail
cd "$(dirname "$0")/.."

SUDO=""
[ "$(id -u)" = "0" ] || SUDO="sudo"
apt_install() {
  echo "[setup] installing with apt (sudo when not root): $*"
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "$@"
}

PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  # Debian ships venv's pip bootstrap separately (python3-venv).
  if ! "$PY" -c 'import ensurepip' 2>/dev/null; then apt_install python3-venv; fi
  echo "[setup] creating .venv"
  "$PY" -m venv .venv
fi
VPY=.venv/bin/python

if ! "$VPY" -c 'import torch, sys; sys.exit(0 if torch.__version__.startswith("2.13.0") else 1)' 2>/dev/null; then
  echo "[setup] installing torch==2.13.0 (CPU wheel) first"
  "$VPY" -m pip install --quiet --upgrade pip
  "$VPY" -m pip install --quiet torch==2.13.0
fi

# vite 7 (under vitest) needs Node 20.19+; Debian 12's own nodejs is 18, so say so early.
if ! node -e 'const [a,b]=process.versions.node.split(".").map(Number); process.exit(a>20||(a===20&&b>=19)?0:1)' 2>/dev/null; then
  echo "[setup] Node.js 20.19 or newer is needed (found: $(node --version 2>/dev/null || echo none));" \
    "install it from nodejs.org, NodeSource or nvm, then run make again" >&2
  exit 1
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
  # shellcheck disable=SC2086  # one word per package
  apt_install $missing
fi
echo "[setup] done"
