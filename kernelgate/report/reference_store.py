"""What a file of the references' store must be to join the history branch (``kernelgate.report.history``).

The store (``kernelgate.measure.references``) is kept on the branch under ``references/``, one file per suite
and environment, ``references/<suite>/<key>.json``: ``{"environment": {...}, "commit": ..., "times": {case:
{reference: ms}}}``. A file is taken only where it holds exactly that, every time a positive finite number,
and its name is the one its environment's key gives it. Standard library only.
"""

import math
import re
from pathlib import Path

from kernelgate.measure import references

FOLDER = "references"  # the store's folder on the history branch
NAME = re.compile(rf"{FOLDER}/[a-z][a-z0-9_]*/[0-9a-f]{{16}}\.json")
ENTRY = {"environment", "commit", "times"}
ENVIRONMENT = {"suite", *references.GPU_FIELDS, *references.HOST_FIELDS, *references.PACKAGES, "definition"}
COMMIT = re.compile(r"[0-9a-f]{40}")


def problem(name: str, entry: object) -> str | None:
    """What is wrong with ``entry``, read from ``name`` (a path on the branch); None where nothing is."""
    if not isinstance(entry, dict) or set(entry) != ENTRY:
        return f"not a references' store entry (needs exactly {sorted(ENTRY)})"
    env, commit, times = entry["environment"], entry["commit"], entry["times"]
    if not isinstance(env, dict) or set(env) != ENVIRONMENT or not all(isinstance(v, str) for v in env.values()):
        return f"environment: needs exactly {sorted(ENVIRONMENT)}, each a string"
    expected = references.entry_path(Path(FOLDER), env).as_posix()
    if name != expected:
        return f"its environment's entry is named {expected}"
    if not isinstance(commit, str) or not COMMIT.fullmatch(commit):
        return f"commit {commit!r}: not a full commit hash"
    if not isinstance(times, dict):
        return "times: not a table of cases"
    for case, refs in times.items():
        if not isinstance(refs, dict):
            return f"times[{case!r}]: not a table of references"
        for reference, ms in refs.items():
            if isinstance(ms, bool) or not isinstance(ms, (int, float)) or not 0 < ms < math.inf:
                return f"times[{case!r}][{reference!r}] = {ms!r}: not a positive finite number of ms"
    return None
