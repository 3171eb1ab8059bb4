"""Per-checkout environments on top of one provisioned runner environment.

The runner's Python holds every pinned package (requirements/runner.txt). Each checkout the PR
check measures (base, head) gets a light virtualenv of its own that sees those packages and has
only that checkout installed, editable, into it: nothing is downloaded, nothing is installed into
the runner's environment, and two checkouts never share an installed ``kernelgate``.

Standard library only: the noxfile and the PR check import it before anything is installed.
"""

import json
import subprocess
import sys
from pathlib import Path

MARKER = "kernelgate-overlay.json"
NEEDED = ("pip", "setuptools")  # what installs a checkout into its overlay, editable and offline

_PROBE = f"""
import importlib.util, json, sys
print(json.dumps({{
    "base": sys._base_executable,
    "version": "%d.%d" % sys.version_info[:2],
    "site": [p for p in sys.path if p.endswith(("site-packages", "dist-packages"))],
    "missing": [name for name in {NEEDED!r} if importlib.util.find_spec(name) is None],
}}))
"""


class RunnerError(Exception):
    """The runner's Python cannot hold the overlays: it lacks packages of requirements/runner.txt."""


def describe(python: str) -> dict:
    """The runner interpreter's base executable, version and site-packages folders."""
    out = subprocess.run([python, "-c", _PROBE], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def overlay_python(dest: Path) -> Path:
    return dest / "bin" / "python"


def overlay(python: str, tree: Path, dest: Path, as_user: dict | None = None) -> Path:
    """A virtualenv at ``dest`` that sees ``python``'s packages and has ``tree`` installed
    editable; returns its interpreter. Reused when it already serves the same tree and runner.
    ``as_user`` (``subprocess`` arguments, with ``env``) runs the build, which is the tree's own code,
    as that tree's user."""
    runner = describe(python)
    missing = runner.pop("missing")
    if missing:
        raise RunnerError(
            f"{python} lacks {' and '.join(missing)}, with which each checkout is installed on top of the runner's "
            "packages: provision the runner from requirements/runner.txt (docs/pr-check.md)"
        )
    wanted = {"runner": python, "tree": str(tree.resolve()), **runner}
    marker = dest / MARKER
    if marker.is_file() and json.loads(marker.read_text()) == wanted:
        return overlay_python(dest)
    as_user = as_user or {}
    subprocess.run([runner["base"], "-m", "venv", "--clear", "--without-pip", str(dest)], check=True, **as_user)
    site = dest / "lib" / f"python{runner['version']}" / "site-packages"
    # A .pth line is appended to sys.path: the overlay's own packages (the checkout) come first.
    (site / "_kernelgate_runner.pth").write_text("".join(f"{p}\n" for p in runner["site"]))
    install = ["-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--no-index", "--no-cache-dir"]
    subprocess.run([str(overlay_python(dest)), *install, "-e", str(tree)], check=True, **as_user)
    marker.write_text(json.dumps(wanted, indent=1))
    return overlay_python(dest)


if __name__ == "__main__":
    print(overlay(sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])))
