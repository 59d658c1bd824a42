"""``python -m spark_ext doctor <connector> ...``: see ``spark_ext.cli``."""

import sys

from spark_ext.cli import main

sys.exit(main())
