"""``python -m bench.soak [--minutes 60]``: see ``bench/soak/__init__.py``."""

import sys

from bench.soak.run import main

if __name__ == "__main__":
    sys.exit(main())
