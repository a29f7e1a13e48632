"""``python -m transformer_conformance.conformance [OPTIONS]``: the suite's command line (runner/cli.py)."""

import sys

from transformer_conformance.conformance.runner.cli import main

if __name__ == "__main__":
    sys.exit(main())
