import sys

from bench.faults import main

sys.exit(main(sys.argv[1:]))
