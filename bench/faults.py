"""``make faults``: crash-and-restart runs per pipeline, one ``FAULTS`` line each.

Pipelines register here as their connectors are built.
"""

from __future__ import annotations

import sys

PIPELINES: dict[str, object] = {}


def main() -> int:
    if not PIPELINES:
        print("no fault pipelines are built yet")
    return 0


if __name__ == "__main__":
    sys.exit(main())
