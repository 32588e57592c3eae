#!/usr/bin/env bash
# The whole test suite: lint, types, the TypeScript tests, the Python tests
# (engines, widgets, notebooks) and the end-to-end tests in a real JupyterLab
# driven through Debian's Chromium. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export PATH="$PWD/.venv/bin:$PATH"

echo "== ruff"
ruff check src tests benchmarks scripts
ruff format --check src tests benchmarks scripts
echo "== mypy"
mypy src/vinlens
echo "== typescript"
npm run --silent typecheck
echo "== vitest"
npx vitest run
echo "== pytest"
pytest "$@"
