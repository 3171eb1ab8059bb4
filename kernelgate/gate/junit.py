"""Correctness first: the tests must have run, and passed, on the machine that measured.

Input: pytest's JUnit XML (``--junitxml``). Red when a file is missing or
unreadable, holds no test, records a failure or an error, records only
skipped tests (whatever the reason: nothing was tested), or records a GPU test
skipped for want of a device.
"""

import xml.etree.ElementTree as ET
from pathlib import Path

from kernelgate.gate.findings import Finding, Verdict

# tests/conftest.py's NO_GPU_REASON starts with this: such a test ran nowhere.
GPU_SKIP_MARKER = "NO GPU"


def correctness(paths: list[Path]) -> list[Finding]:
    if not paths:
        return [_red("-", "no JUnit XML given: the tests' outcome on this machine is unknown")]
    return [_finding(path) for path in paths]


def _finding(path: Path) -> Finding:
    try:
        cases = list(ET.parse(path).getroot().iter("testcase"))
    except FileNotFoundError:
        return _red(str(path), "JUnit XML missing: the tests did not run or did not report")
    except (OSError, ET.ParseError) as exc:
        return _red(str(path), f"JUnit XML unreadable: {exc}")
    if not cases:
        return _red(str(path), "JUnit XML holds no test case")
    failed = [_name(c) for c in cases if c.find("failure") is not None or c.find("error") is not None]
    gpu_skipped = [_name(c) for c in cases if GPU_SKIP_MARKER in _skip_message(c)]
    if failed:
        return _red(str(path), f"{len(failed)} of {len(cases)} tests failed or errored: {_some(failed)}")
    if all(c.find("skipped") is not None for c in cases):
        reasons = sorted({_skip_message(c).strip() or "no reason given" for c in cases})
        return _red(str(path), f"all {len(cases)} tests were skipped: nothing was tested ({_some(reasons)})")
    if gpu_skipped:
        reason = f"{len(gpu_skipped)} GPU tests skipped (no device), so they ran nowhere: {_some(gpu_skipped)}"
        return _red(str(path), reason)
    return Finding("tests", "pytest", str(path), Verdict.PASS, f"{len(cases)} tests, none failed", badness=0.0)


def _red(case: str, reason: str) -> Finding:
    return Finding("tests", "pytest", case, Verdict.FAIL, reason)


def _name(case: ET.Element) -> str:
    return f"{case.get('classname', '')}::{case.get('name', '')}"


def _skip_message(case: ET.Element) -> str:
    skipped = case.find("skipped")
    return "" if skipped is None else f"{skipped.get('message', '')} {skipped.text or ''}"


def _some(names: list[str], shown: int = 3) -> str:
    more = f" and {len(names) - shown} more" if len(names) > shown else ""
    return ", ".join(names[:shown]) + more
