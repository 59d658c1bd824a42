"""``python -m services up|down|status|baseline-jars``."""

import sys

from services import main

sys.exit(main(sys.argv[1:]))
