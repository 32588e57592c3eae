.PHONY: setup demo test js

# Set everything up and open the demo.
demo: setup
	.venv/bin/vinlens demo

setup:
	bash scripts/setup.sh

# The whole test suite (Python, TypeScript and the browser).
test:
	bash scripts/test.sh

js:
	npm run build
