"""Processes a test starts itself: servers stopped by their own process group, and what a
driver subprocess said when it ended other than expected."""

from __future__ import annotations

import os
import re
import signal
import subprocess


def stop_group(proc: subprocess.Popen, grace_s: float = 30.0) -> None:
    """SIGTERM ``proc``'s process group (started with ``start_new_session``), SIGKILL
    after ``grace_s``."""
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(grace_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


# A line that starts or continues an error report: a Python exception (``ValueError: ...``,
# ``pyspark.errors...StreamingQueryException: ...``), a JVM one, a cause in its chain, or a
# driver's own "query failed" line. Stack frames (``  File ...``, ``\tat ...``) are left out.
_ERROR_LINE = re.compile(
    r"^(Caused by:|query failed:|\[[A-Z_]+\]|[\w.$]*(Error|Exception|Failure)\b|"
    r"=== Streaming Query ===|\s*[\w.]+\.(\w*Error|\w*Exception): )"
)
_REPORT_CHARS = 6000


def driver_report(res: subprocess.CompletedProcess) -> str:
    """What a test says when a driver subprocess ended other than expected: its exit code,
    the error lines of its output (each exception's first lines and its cause chain, from
    anywhere in the output, not only its tail) and the last lines, never a cut-off tail
    alone: a long plan or a list of ids printed after the error must not hide it."""
    text = (res.stderr or "") + ("\n" + res.stdout if isinstance(res.stdout, str) and res.stdout else "")
    lines = text.splitlines()
    picked: list[str] = []
    for i, line in enumerate(lines):
        if _ERROR_LINE.match(line):
            # the exception line and up to two lines of its message after it
            for follow in lines[i:i + 3]:
                if follow.startswith(("\tat ", "  File ", "    ")) and follow is not line:
                    break
                if not picked or picked[-1] != follow[:400]:
                    picked.append(follow[:400])
    seen: set[str] = set()
    errors = [x for x in picked if not (x in seen or seen.add(x))]  # type: ignore[func-returns-value]
    summary = "\n".join(errors)
    if len(summary) > _REPORT_CHARS:
        summary = summary[:_REPORT_CHARS // 2] + "\n[...]\n" + summary[-_REPORT_CHARS // 2:]
    tail = "\n".join(line[:300] for line in lines[-10:])
    return (f"driver exited {res.returncode}\n--- errors (first lines and causes) ---\n{summary or '(none)'}"
            f"\n--- last lines ---\n{tail}")
