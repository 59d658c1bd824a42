"""Build the project's wheel from a copy of the checkout.

``pip wheel`` of the checkout itself writes ``build/`` there, which two pytest workers
building at once would share; a copy each keeps them apart.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def build_wheel(tmp: Path) -> Path:
    """The wheel of the working tree (tracked and new files, not ignored ones, and the JVM
    companion jar ``make jvm`` built, which git ignores), in ``tmp``."""
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT, check=True,
                           capture_output=True, text=True).stdout.split("\0")
    jars = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "spark_ext" / "jars").glob("*.jar"))
    assert jars, "no JVM companion jar in spark_ext/jars/: run make jvm"
    files += jars
    src = tmp / "src"
    for name in filter(None, files):
        if (ROOT / name).is_file():
            (src / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, src / name)
    out = tmp / "wheels"
    res = subprocess.run([sys.executable, "-m", "pip", "wheel", str(src), "--no-deps", "--no-build-isolation",
                          "-q", "-w", str(out)], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    (wheel,) = out.glob("spark_ext-*.whl")
    return wheel
