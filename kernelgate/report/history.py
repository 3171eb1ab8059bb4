"""Copy asv result files and the references' store into the history branch's checkout, and nothing else.

    python -m kernelgate.report.history SOURCE HISTORY

SOURCE is what the GPU job uploaded; HISTORY a checkout of the ``asv-results`` branch, which
the copying job can push. Only asv's own files are taken, each a regular JSON file of the form
asv writes (``benchmarks.json``, ``<machine>/machine.json``, ``<machine>/<commit>-<env>.json``),
and the store's, each an entry of the form ``kernelgate.report.reference_store`` checks
(``references/<suite>/<key>.json``). Anything else (a link, a ``.git`` folder, a hook, a config
file, a file of another shape) stops the copy before any file is written. Standard library only:
the job runs it without installing.
"""

import json
import re
import shutil
import sys
from collections.abc import Callable
from pathlib import Path

from kernelgate.report import reference_store

MAX_BYTES = 32 * 1024 * 1024
MACHINE = r"[A-Za-z0-9][A-Za-z0-9._-]*"


def asv_form(*keys: str) -> Callable[[str, object], str | None]:
    """The check of a file asv writes: a JSON object that holds ``keys``."""

    def problem(name: str, data: object) -> str | None:
        if isinstance(data, dict) and set(keys) <= set(data):
            return None
        return f"not of asv's form (needs {sorted(keys)})"

    return problem


# The form of each file the branch takes, and the check of what it holds: (name, data) -> the problem, or None.
FILES = {
    re.compile(r"benchmarks\.json"): asv_form("version"),
    re.compile(rf"{MACHINE}/machine\.json"): asv_form("version", "machine"),
    re.compile(rf"{MACHINE}/[0-9a-f]{{8}}-[A-Za-z0-9._-]+\.json"): asv_form(
        "version", "commit_hash", "params", "results"
    ),
    reference_store.NAME: reference_store.problem,
}


class RejectedFile(Exception):
    """A file the history branch must not receive."""


def checked(source: Path) -> list[Path]:
    """Every file under ``source`` (relative paths), once each passes; else RejectedFile naming it."""
    files = []
    for path in sorted(source.rglob("*")):
        name = path.relative_to(source).as_posix()
        if path.is_symlink():
            raise RejectedFile(f"{name}: a link")
        if path.is_dir():
            continue
        check = next((check for form, check in FILES.items() if form.fullmatch(name)), None)
        if check is None or ".git" in path.relative_to(source).parts:
            raise RejectedFile(f"{name}: not an asv result file nor a file of the references' store")
        if path.stat().st_size > MAX_BYTES:
            raise RejectedFile(f"{name}: larger than {MAX_BYTES} bytes")
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (UnicodeDecodeError, ValueError) as exc:
            raise RejectedFile(f"{name}: not JSON ({exc})") from exc
        problem = check(name, data)
        if problem:
            raise RejectedFile(f"{name}: {problem}")
        files.append(path.relative_to(source))
    if not files:
        raise RejectedFile(f"{source} holds no file")
    return files


def copy_results(source: Path, history: Path) -> list[Path]:
    """Copy the checked files from ``source`` into ``history``; returns them."""
    files = checked(source)
    for relative in files:
        target = history / relative
        if target.is_symlink():
            raise RejectedFile(f"{relative}: the history branch holds a link there")
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source / relative, target)
    return files


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    try:
        files = copy_results(Path(argv[0]), Path(argv[1]))
    except (RejectedFile, OSError) as exc:
        print(f"refused: {exc}", file=sys.stderr)
        return 1
    print(f"copied {len(files)} files")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
