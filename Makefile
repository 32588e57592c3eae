.PHONY: setup demo test check js

VENV ?= .venv
BIN := $(VENV)/bin

# Set everything up and open the demo.
demo: setup
	$(BIN)/vinlens demo

setup:
	bash scripts/setup.sh

# The whole test suite (Python, TypeScript and the browser), after making sure setup is done.
test:
	bash scripts/test.sh

# The fast inner loop, without setup: lint, types, then the tests that need no browser.
check:
	$(BIN)/ruff check src tests benchmarks scripts
	$(BIN)/ruff format --check src tests benchmarks scripts
	$(BIN)/mypy src/vinlens
	npx --no-install tsc --noEmit -p tsconfig.json
	npx --no-install vitest run
	$(BIN)/pytest -q -m "not e2e and not slow"

js:
	npm run build
