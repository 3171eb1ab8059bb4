"""The GitHub Actions workflows run by a real Actions engine, nektos/act, on this machine, offline.

What GitHub provides is stood in for by local parts, each of which records what reached it:

* ``Origin``: a bare repository reached at ``https://github.com/OWNER/NAME`` through git's
  ``url.<base>.insteadOf`` (in a ``GIT_CONFIG_GLOBAL`` file), holding main, an ``asv-results`` branch
  and pull requests with GitHub's ``refs/pull/N/head`` and ``refs/pull/N/merge``.
* ``GitHubApi``: an HTTPS server answering the REST calls the workflows make (a pull request's head,
  its labels, commit statuses, comments), which records every request. ``gh`` reaches it through
  ``GH_HOST``, ``GH_ENTERPRISE_TOKEN`` and ``SSL_CERT_FILE``; github-script's Octokit through
  ``GITHUB_API_URL`` and ``NODE_EXTRA_CA_CERTS``.
* act's own artifact server, and the pinned actions from ``shared/act/actions`` (its README).
* The runner's tool cache: this machine's Python stands in for the workflows' "3.12" (setup-python
  finds it there and downloads nothing), and pip inside the jobs installs from a wheelhouse
  downloaded once per test session (``PIP_NO_INDEX``, ``PIP_FIND_LINKS``).
* The GPU runner's Python (``KERNELGATE_RUNNER_PYTHON``): ``gpu_runner.py`` beside this file.

Jobs run on this host (act's ``-self-hosted`` platform), the GPU job's labels too.
"""

import contextlib
import dataclasses
import http.server
import json
import os
import re
import shutil
import socket
import ssl
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
WORKFLOWS = ROOT / ".github" / "workflows"
# The actions the workflows pin, exported at those commits (shared/act/README.md), beside the checkout
# in CI and in a developer's tree.
ACTIONS = ROOT.parent / "shared" / "act" / "actions"
TWIRP_COMPAT = ROOT.parent / "shared" / "act" / "twirp-compat.js"
REPO = "octo/kernels"
TOKEN = "ghs_standin_runtime_token"  # the job's GITHUB_TOKEN (act's -s GITHUB_TOKEN)
API_TOKEN = "ghs_standin_gh_enterprise_token"  # what gh sends to the stand-in host (GH_ENTERPRISE_TOKEN)
# The workflows' Python version, which this machine's interpreter stands in for (whatever its own
# version): setup-python takes what the tool cache holds under that name.
WORKFLOW_PYTHON = "3.12.0"
ACT_PLATFORMS = ["-P", "ubuntu-24.04=-self-hosted", "-P", "gpu=-self-hosted"]
USES = re.compile(r"^\s*(?:-\s+)?uses:\s*([\w.-]+)/([\w.-]+)@([0-9a-f]{40})", re.MULTILINE)
NODE_MAJOR = 24  # the pinned actions declare `using: node24`


def git(cwd: Path, *argv: str, env: dict | None = None) -> str:
    ident = ["-c", "user.name=test", "-c", "user.email=test@example.com", "-c", "commit.gpgsign=false"]
    done = subprocess.run(
        ["git", *ident, *argv], cwd=cwd, capture_output=True, text=True, check=False, env=env
    )  # fmt: skip
    if done.returncode:
        raise RuntimeError(f"git {' '.join(argv)} in {cwd}: {done.stderr.strip()}")
    return done.stdout.strip()


# --- the tools --------------------------------------------------------------------------------------


def missing_tools() -> str | None:
    """Why the workflows cannot run here, or None: act, node 24 and gh on PATH, the pinned actions."""
    missing = [name for name in ("act", "gh", "node") if shutil.which(name) is None]
    if missing:
        return f"{', '.join(missing)} not on PATH"
    version = subprocess.run(["node", "--version"], capture_output=True, text=True, check=False).stdout.strip()
    if not version.startswith(f"v{NODE_MAJOR}."):
        return f"node on PATH is {version or 'unknown'}, the pinned actions need node {NODE_MAJOR}"
    if not ACTIONS.is_dir() or not TWIRP_COMPAT.is_file():
        return f"{ACTIONS} (the pinned actions, shared/act) is not there"
    return None


def pinned_actions() -> dict[str, Path]:
    """``OWNER/NAME@SHA`` of every action the workflows pin that ``shared/act/actions`` holds."""
    found = {}
    for workflow in WORKFLOWS.glob("*.yml"):
        for owner, name, sha in USES.findall(workflow.read_text()):
            if owner == "actions" and (ACTIONS / name / "action.yml").is_file():
                found[f"{owner}/{name}@{sha}"] = ACTIONS / name
    return found


# --- the origin -------------------------------------------------------------------------------------


@dataclasses.dataclass
class PullRequest:
    number: int
    head: str  # the head commit a maintainer approved
    merge: str  # GitHub's test merge of the pull request's current head into main


class Origin:
    """The repository as GitHub holds it: main (this checkout's tracked files as they are on disk), an
    empty ``asv-results`` branch, and pull requests."""

    def __init__(self, root: Path):
        self.root = root
        self.author = root / "author"
        self.author.mkdir(parents=True)
        for name in filter(None, git(ROOT, "ls-files", "-z").split("\0")):
            if (ROOT / name).is_file():
                (self.author / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(ROOT / name, self.author / name)
        git(self.author, "init", "-q", "-b", "main")
        git(self.author, "add", "-A")
        git(self.author, "commit", "-qm", "main")
        git(self.author, "switch", "-q", "--orphan", "asv-results")  # as main.yml tells a maintainer to make it
        git(self.author, "commit", "-q", "--allow-empty", "-m", "asv results")
        git(self.author, "switch", "-q", "main")
        # https://github.com/octo/kernels is this folder (git_config's insteadOf).
        self.hosts = root / "github.com"
        self.bare = self.hosts / REPO
        git(root, "clone", "-q", "--bare", str(self.author), str(self.bare))
        self.git_config = root / "gitconfig"
        self.git_config.write_text(
            f'[url "file://{self.hosts}/"]\n\tinsteadOf = https://github.com/\n'
            "[user]\n\tname = test\n\temail = test@example.com\n"
        )
        self.pulls: dict[int, PullRequest] = {}
        self.main = git(self.bare, "rev-parse", "main")

    def keep_on_asv_results(self, source: Path, files: list[str]) -> None:
        """Commit ``files`` (paths under ``source``) onto ``asv-results``, as a run of main's persisting job does."""
        git(self.author, "switch", "-q", "asv-results")
        for name in files:
            (self.author / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source / name, self.author / name)
        git(self.author, "add", "-A")
        git(self.author, "commit", "-qm", "asv results of an earlier run")
        git(self.author, "switch", "-q", "main")
        git(self.author, "push", "-q", str(self.bare), "asv-results")

    def pull_request(self, number: int, changes: list[dict[str, str]]) -> PullRequest:
        """A pull request of one commit per entry of ``changes`` (path: text appended); the approved head is
        its first commit, its current head (refs/pull/N/head, and the test merge) its last."""
        branch = f"pr-{number}"
        git(self.author, "switch", "-q", "-c", branch, "main")
        commits = []
        for k, change in enumerate(changes, start=1):
            for path, text in change.items():
                with (self.author / path).open("a") as fh:
                    fh.write(text)
            git(self.author, "add", "-A")
            git(self.author, "commit", "-qm", f"pull request {number}, commit {k}")
            commits.append(git(self.author, "rev-parse", "HEAD"))
        git(self.author, "switch", "-q", "--detach", "main")  # GitHub's test merge: parents main, head
        git(self.author, "merge", "-q", "--no-ff", "-m", f"Merge {commits[-1]} into main", branch)
        merge = git(self.author, "rev-parse", "HEAD")
        git(self.author, "switch", "-q", "main")
        git(self.author, "push", "-q", str(self.bare), f"{commits[-1]}:refs/pull/{number}/head")
        git(self.author, "push", "-q", str(self.bare), f"{merge}:refs/pull/{number}/merge")
        self.pulls[number] = PullRequest(number, commits[0], merge)
        return self.pulls[number]

    def base_moved(self, number: int) -> str:
        """Main moves on (a commit only the new test merge holds) and GitHub merges the pull request's head
        into it again: refs/pull/N/merge changes. Returns the new test merge."""
        git(self.author, "switch", "-q", "--detach", "main")
        (self.author / "docs" / f"moved-{number}.md").write_text("Main moved on.\n")
        git(self.author, "add", "-A")
        git(self.author, "commit", "-qm", "main moves on")
        git(self.author, "merge", "-q", "--no-ff", "-m", "Merge into main", self.head_of(number))
        merge = git(self.author, "rev-parse", "HEAD")
        git(self.author, "switch", "-q", "main")
        git(self.author, "push", "-q", "-f", str(self.bare), f"{merge}:refs/pull/{number}/merge")
        return merge

    def head_of(self, number: int) -> str:
        """The pull request's head now, as GitHub's API answers it."""
        return git(self.bare, "rev-parse", f"refs/pull/{number}/head")

    def clone(self, dest: Path) -> Path:
        """A clone of main that names the origin as GitHub's address, where act runs (its remote gives
        the repository, its HEAD the commit)."""
        git(self.root, "clone", "-q", str(self.bare), str(dest))
        git(dest, "remote", "set-url", "origin", f"https://github.com/{REPO}")
        return dest


# --- the REST API -----------------------------------------------------------------------------------


def make_certificate(folder: Path) -> tuple[Path, Path, Path]:
    """A CA, and a certificate it signs for localhost: (CA certificate, server certificate, server key)."""
    folder.mkdir(parents=True, exist_ok=True)
    ca, ca_key = folder / "ca.pem", folder / "ca-key.pem"
    cert, key, request = folder / "server.pem", folder / "server-key.pem", folder / "server.csr"
    ext = folder / "server.ext"
    ext.write_text("subjectAltName = DNS:localhost, IP:127.0.0.1\nbasicConstraints = CA:FALSE\n")
    openssl = ["openssl"]
    for argv in (
        ["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=stand-in GitHub API CA",
         "-keyout", str(ca_key), "-out", str(ca)],
        ["req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=localhost", "-keyout", str(key), "-out", str(request)],
        ["x509", "-req", "-in", str(request), "-CA", str(ca), "-CAkey", str(ca_key), "-CAcreateserial", "-days", "2",
         "-extfile", str(ext), "-out", str(cert)],
    ):  # fmt: skip
        subprocess.run([*openssl, *argv], capture_output=True, check=True)
    return ca, cert, key


@dataclasses.dataclass
class Request:
    method: str
    path: str  # under the API's root, e.g. repos/octo/kernels/statuses/SHA
    body: dict | None
    authorization: str


class GitHubApi:
    """The REST calls the workflows make, answered from the origin and a pull request's labels; every request
    is recorded in ``requests`` (one that none of the routes knows gets a 404)."""

    def __init__(self, origin: Origin, certificate: tuple[Path, Path, Path]):
        self.origin = origin
        self.ca = certificate[0]
        self.labels: dict[int, list[str]] = {}
        self.comments: dict[int, list[dict]] = {}
        self.requests: list[Request] = []
        self.on_pending: Callable[[], object] | None = None  # called when a pending status is set
        api = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def _answer(self):
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                path = self.path.split("?", 1)[0].removeprefix("/api/v3/").strip("/")
                body = json.loads(raw) if raw else None
                api.requests.append(Request(self.command, path, body, self.headers.get("Authorization", "")))
                status, answer = api.answer(self.command, path, body)
                data = json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json; charset=utf-8")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PATCH = do_PUT = do_DELETE = _answer

            def log_message(self, *args):  # quiet: the requests are recorded
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(certificate[1], certificate[2])
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def host(self) -> str:
        return f"localhost:{self.port}"

    @property
    def url(self) -> str:
        return f"https://{self.host}/api/v3"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def answer(self, method: str, path: str, body: dict | None) -> tuple[int, object]:
        parts = path.split("/")
        if parts[:3] != ["repos", *REPO.split("/")]:
            return 404, {"message": "Not Found"}
        route = parts[3:]
        match (method, route):
            case ("GET", ["pulls", number]):
                pr = self.origin.pulls.get(int(number))
                if pr is None:
                    return 404, {"message": "Not Found"}
                return 200, {"number": pr.number, "state": "open", "head": {"sha": self.origin.head_of(pr.number)},
                             "base": {"ref": "main", "sha": self.origin.main}}  # fmt: skip
            case ("GET", ["hash-algorithm"]):  # actions/checkout of a branch asks
                return 200, {"hash_algorithm": "sha1"}
            case ("GET", ["issues", number, "labels"]):
                return 200, [{"name": name} for name in self.labels.get(int(number), [])]
            case ("POST", ["statuses", sha]):
                if (body or {}).get("state") == "pending" and self.on_pending is not None:
                    self.on_pending()
                return 201, {"id": len(self.requests), "sha": sha, **(body or {})}
            case ("GET", ["issues", number, "comments"]):
                return 200, self.comments.get(int(number), [])
            case ("POST", ["issues", number, "comments"]):
                comment = {"id": 1000 + len(self.requests), "body": (body or {}).get("body", ""),
                           "user": {"login": "github-actions[bot]", "type": "Bot"}}  # fmt: skip
                self.comments.setdefault(int(number), []).append(comment)
                return 201, comment
            case ("PATCH", ["issues", "comments", comment_id]):
                for comment in (c for cs in self.comments.values() for c in cs if c["id"] == int(comment_id)):
                    comment["body"] = (body or {}).get("body", "")
                    return 200, comment
        return 404, {"message": "Not Found"}

    def statuses(self) -> list[dict]:
        """The commit statuses set, in order: {sha, state, context, ...}."""
        return [{"sha": r.path.rsplit("/", 1)[1], **(r.body or {})} for r in self.requests
                if r.method == "POST" and r.path.startswith(f"repos/{REPO}/statuses/")]  # fmt: skip

    def comment_writes(self) -> list[Request]:
        """The report comments created or updated."""
        created = lambda r: r.method == "POST" and r.path.endswith("/comments")
        return [r for r in self.requests if created(r) or (r.method == "PATCH" and "/issues/comments/" in r.path)]


# --- act --------------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclasses.dataclass
class Run:
    """One run of act: its exit code, its log, each job's result and the artifacts it uploaded."""

    returncode: int
    log: str
    jobs: dict[str, list[str]]  # job id -> each of its runs' result ("success", "failure"), a matrix's in turn
    folder: Path  # act.log, event.json, artifacts/

    @property
    def artifacts(self) -> Path:
        return self.folder / "artifacts"

    def artifact(self, name: str, dest: Path) -> Path:
        """The artifact ``name`` of this run, unpacked into ``dest``."""
        found = sorted(self.artifacts.rglob(f"{name}.zip")) or sorted(self.artifacts.rglob(f"{name}/*.zip"))
        if not found:
            listing = sorted(str(p.relative_to(self.artifacts)) for p in self.artifacts.rglob("*"))
            raise AssertionError(f"no artifact {name} among {listing}")
        shutil.unpack_archive(found[0], dest, "zip")
        return dest


class Engine:
    """act, set up once per test session: the tool cache, the wheelhouse, the certificate."""

    def __init__(self, root: Path, wheelhouse: Path):
        self.root = root
        self.cache = root / "act-cache"  # act's action cache and host workspaces; RUNNER_TOOL_CACHE below it
        python = self.cache / "tool_cache" / "Python" / WORKFLOW_PYTHON / "x64"
        # This machine's Python stands in for the workflows' 3.12: a virtualenv of it, so that what the jobs
        # install stays out of the interpreter the tests run on.
        base = getattr(sys, "_base_executable", sys.executable)
        subprocess.run([base, "-m", "venv", str(python)], check=True, capture_output=True)
        (python.parent / "x64.complete").touch()
        self.wheelhouse = wheelhouse
        self.certificate = make_certificate(root / "tls")

    def run(
        self,
        workspace: Path,
        workflow: str,
        event_name: str,
        event: dict,
        api: GitHubApi,
        origin: Origin,
        env: dict[str, str] | None = None,
        variables: dict[str, str] | None = None,
        job: str | None = None,
        timeout: float = 600,
    ) -> Run:
        """``act EVENT`` on ``.github/workflows/WORKFLOW`` of the clone ``workspace``."""
        run_dir = workspace.parent / f"{workspace.name}-act"
        run_dir.mkdir()
        event_path = run_dir / "event.json"
        event_path.write_text(json.dumps({"repository": {"full_name": REPO, "default_branch": "main"}, **event}))
        runner_env = {
            "GIT_CONFIG_GLOBAL": str(origin.git_config),
            # gh: the stand-in API as a GitHub Enterprise host; Octokit (github-script): GITHUB_API_URL.
            "GH_HOST": api.host,
            "GH_ENTERPRISE_TOKEN": API_TOKEN,
            "GH_NO_UPDATE_NOTIFIER": "1",
            "SSL_CERT_FILE": str(api.ca),
            "GITHUB_API_URL": api.url,
            "NODE_EXTRA_CA_CERTS": str(api.ca),
            # act 0.2.89's artifact server and upload-artifact v7 (shared/act/README.md).
            "NODE_OPTIONS": f"--require {TWIRP_COMPAT}",
            "PIP_NO_INDEX": "1",
            "PIP_FIND_LINKS": str(self.wheelhouse),
            "PIP_DISABLE_PIP_VERSION_CHECK": "1",
            **(env or {}),
        }
        argv = [
            "act", event_name, "-W", str(workspace / ".github" / "workflows" / workflow), "-e", str(event_path),
            *ACT_PLATFORMS, "--action-offline-mode", "--action-cache-path", str(self.cache), "--no-skip-checkout",
            "--artifact-server-path", str(run_dir / "artifacts"), "--artifact-server-addr", "127.0.0.1",
            "--artifact-server-port", str(free_port()), "--no-cache-server", "--defaultbranch", "main",
            "--log-prefix-job-id", "-s", f"GITHUB_TOKEN={TOKEN}",
        ]  # fmt: skip
        for spec, folder in pinned_actions().items():
            argv += ["--local-repository", f"{spec}={folder}"]
        for name, value in runner_env.items():
            argv += ["--env", f"{name}={value}"]
        for name, value in (variables or {}).items():
            argv += ["--var", f"{name}={value}"]
        if job:
            argv += ["-j", job]
        done = subprocess.run(
            argv, cwd=workspace, capture_output=True, text=True, timeout=timeout, check=False,
            env={**os.environ, "GIT_CONFIG_GLOBAL": str(origin.git_config)},
        )  # fmt: skip
        log = done.stdout + done.stderr
        (run_dir / "act.log").write_text(log)
        return Run(done.returncode, log, job_results(log), run_dir)


JOB_END = re.compile(r"^\[([^\]]+)\]\s+🏁\s+Job (succeeded|failed)", re.MULTILINE)


def job_results(log: str) -> dict[str, list[str]]:
    """Each job act ran and its results, from act's log (``--log-prefix-job-id``; a skipped job is absent)."""
    results: dict[str, list[str]] = {}
    for job, word in JOB_END.findall(log):
        results.setdefault(job, []).append("success" if word == "succeeded" else "failure")
    return results


@contextlib.contextmanager
def serving(origin: Origin, engine: Engine):
    api = GitHubApi(origin, engine.certificate)
    try:
        yield api
    finally:
        api.close()
