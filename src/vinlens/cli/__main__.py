"""``python -m vinlens.cli``: the same as the ``vinlens`` console script."""

import sys

from vinlens.cli import main

sys.exit(main())
