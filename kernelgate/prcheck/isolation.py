"""Where head's code runs: as an unprivileged user of its own, in a scratch folder fresh for each run.

A pull request's head is untrusted code, and the PR check runs it: its environment's build, its GPU tests,
its warm-up and its benchmark worker. Given ``--head-user NAME`` (``$KERNELGATE_HEAD_USER``) the check, which
then runs as root, starts each of those processes as NAME, whose only writable place is its scratch folder:
head's worktree, environment, JIT caches and home. The output folder, base's worktree, environment and caches
stay the check's own, so head's code can neither rewrite what the verdict reads nor leave compiled code that
base's or main's timings load. NAME must be able to run the runner's Python and read the checkout that runs
the check (its worker script). Without a head user (a check run by hand) head's processes run as the check
itself, in the same fresh scratch folder.
"""

import os
import pwd
import re
import tempfile
from pathlib import Path

HEAD_USER_ENV = "KERNELGATE_HEAD_USER"
# Never handed to head's processes: the runner's tokens and its job's control channels.
WITHHELD = re.compile(r"^(ACTIONS_|GITHUB_|RUNNER_)|TOKEN|SECRET|PASSWORD", re.IGNORECASE)


class IsolationError(Exception):
    """Head's processes cannot be run as asked: no such user, or the check lacks the right to switch to it."""


def account(user: str | None) -> pwd.struct_passwd | None:
    """The head user's account (None: head runs as the check); refuses what would not isolate anything."""
    if not user:
        return None
    try:
        entry = pwd.getpwnam(user)
    except KeyError as exc:
        raise IsolationError(f"head user {user!r}: no such user on this runner") from exc
    if entry.pw_uid == 0 or entry.pw_uid == os.geteuid():
        raise IsolationError(f"head user {user!r} is {'root' if entry.pw_uid == 0 else 'the check itself'}: "
                             "name an unprivileged user of its own")  # fmt: skip
    if os.geteuid() != 0:
        raise IsolationError(f"running head's processes as {user!r} needs the check to run as root (docs/security.md)")
    return entry


def popen_user(user: str | None) -> dict:
    """``subprocess.Popen`` arguments that start a process as ``user`` with its own group only."""
    entry = account(user)
    return {} if entry is None else {"user": entry.pw_uid, "group": entry.pw_gid, "extra_groups": []}


def scratch(user: str | None) -> Path:
    """A fresh folder in the system's temporary folder, which every user can reach, that belongs to ``user``
    alone (mode 700)."""
    folder = Path(tempfile.mkdtemp(prefix="kernelgate-head-"))
    entry = account(user)
    if entry is not None:
        os.chown(folder, entry.pw_uid, entry.pw_gid)
    return folder


def head_env(folder: Path) -> dict[str, str]:
    """Head's JIT caches and home, all in its scratch folder."""
    return {
        "HOME": str(folder / "home"),
        "XDG_CACHE_HOME": str(folder / "home" / ".cache"),
        "TRITON_CACHE_DIR": str(folder / "cache" / "triton"),
        "TILELANG_CACHE_DIR": str(folder / "cache" / "tilelang"),
        "TORCHINDUCTOR_CACHE_DIR": str(folder / "cache" / "inductor"),
    }


def environ(side_env: dict[str, str], untrusted: bool) -> dict[str, str]:
    """The environment a side's process starts with: the check's own, less what head must not see."""
    inherited = {k: v for k, v in os.environ.items() if not (untrusted and WITHHELD.search(k))}
    return {**inherited, **side_env}
