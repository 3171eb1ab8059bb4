"""What the results-persisting job lets into the history branch: asv's result files and the references' store,
nothing else."""

import json
import os
import re

import pytest

from kernelgate.measure import references
from kernelgate.report.history import RejectedFile, copy_results, main

RESULT = {"version": 2, "commit_hash": "a" * 40, "params": {}, "results": {}}
GPU = {"name": "NVIDIA H200", "driver_version": "580.159.04", "clocks.applications.graphics": "1980 MHz",
       "clocks.max.sm": "1980 MHz", "clocks.max.memory": "3201 MHz", "power.limit": "700.00 W"}  # fmt: skip
TIMES = {"RMSNorm/8192x1024-bfloat16-fwd": {"torch": 0.021, "liger": 0.018, "copy": 0.012}}


@pytest.fixture()
def source(tmp_path):
    root = tmp_path / "artifact"
    (root / "h100-host").mkdir(parents=True)
    (root / "benchmarks.json").write_text(json.dumps({"version": 2}))
    (root / "h100-host" / "machine.json").write_text(json.dumps({"version": 1, "machine": "h100-host"}))
    (root / "h100-host" / "aaaaaaaa-existing-py_python3.json").write_text(json.dumps(RESULT))
    return root


@pytest.fixture()
def stored(source, monkeypatch):
    """The references' store's entry for RMSNorm on an H200, where the benchmark job leaves it in the artifact."""
    monkeypatch.setattr(references, "gpu_settings", lambda: GPU)
    env = references.environment("rms_norm", lambda path: path.encode())
    return references.record(source / "references", env, TIMES, "c" * 40)


def test_result_files_are_copied(source, tmp_path):
    history = tmp_path / "history"
    history.mkdir()
    assert main([str(source), str(history)]) == 0
    assert json.loads((history / "h100-host" / "aaaaaaaa-existing-py_python3.json").read_text()) == RESULT


@pytest.mark.parametrize(
    ("path", "content", "reason"),
    [
        (".git/hooks/post-checkout", "#!/bin/sh\n", "not an asv result file"),
        ("h100-host/.git/config", "[core]\n", "not an asv result file"),
        (".gitattributes", "* filter=x\n", "not an asv result file"),
        ("h100-host/notes.txt", "hello", "not an asv result file"),
        ("h100-host/deadbeef-env.json", "{not json", "not JSON"),
        ("h100-host/deadbeef-env.json", json.dumps({"version": 2}), "not of asv's form"),
        ("h100-host/deadbeef-env.json", json.dumps([1, 2]), "not of asv's form"),
        ("h100-host/machine.json", "\xff\xfe", "not JSON"),
        ("a/b/deadbeef-env.json", json.dumps(RESULT), "not an asv result file"),
    ],
)
def test_anything_else_stops_the_copy_before_a_file_is_written(source, tmp_path, path, content, reason):
    (source / path).parent.mkdir(parents=True, exist_ok=True)
    (source / path).write_text(content, encoding="latin-1")
    history = tmp_path / "history"
    history.mkdir()
    with pytest.raises(RejectedFile, match=reason):
        copy_results(source, history)
    assert not any(history.iterdir()), "nothing is written when one file is refused"


def test_links_are_refused(source, tmp_path):
    os.symlink("/etc/passwd", source / "h100-host" / "cafebabe-env.json")
    with pytest.raises(RejectedFile, match="a link"):
        copy_results(source, tmp_path)


def test_an_empty_artifact_is_refused(tmp_path):
    assert main([str(tmp_path), str(tmp_path / "history")]) == 1


def test_the_references_store_is_copied_beside_the_results(source, stored, tmp_path):
    history = tmp_path / "history"
    history.mkdir()
    assert main([str(source), str(history)]) == 0
    name = stored.relative_to(source)
    assert name.parts[:2] == ("references", "rms_norm")
    assert json.loads((history / name).read_text())["times"] == TIMES


REMOVED = object()
CASE = next(iter(TIMES))
TIME = re.escape(f"times[{CASE!r}]['torch'] =")


def edited(entry: dict, where: tuple[str, ...], value) -> dict:
    """``entry`` with its value at the keys ``where`` replaced by ``value``, or removed."""
    *parents, last = where
    inner = entry
    for key in parents:
        inner = inner[key]
    if value is REMOVED:
        del inner[last]
    else:
        inner[last] = value
    return entry


@pytest.mark.parametrize(
    ("where", "value", "reason"),
    [
        (("commit",), REMOVED, re.escape("not a references' store entry (needs exactly ['commit', 'environment',")),
        (("extra",), 1, "not a references' store entry"),
        (("environment", "power.limit"), REMOVED, "environment: needs exactly"),
        (("environment", "torch"), 2.11, "environment: needs exactly .*, each a string"),
        (("environment", "driver_version"), "590.0", r"its environment's entry is named references/rms_norm/\w+\.json"),
        (("environment", "suite"), "layer_norm", "its environment's entry is named references/layer_norm/"),
        (("commit",), "main", "commit 'main': not a full commit hash"),
        (("times",), [], "times: not a table of cases"),
        (("times", CASE), 0.02, re.escape(f"times[{CASE!r}]: not a table of references")),
        (("times", CASE, "torch"), 0.0, f"{TIME} 0.0: not a positive finite number of ms"),
        (("times", CASE, "torch"), -1.0, f"{TIME} -1.0: not a positive finite number"),
        (("times", CASE, "torch"), float("inf"), f"{TIME} inf: not a positive finite number"),
        (("times", CASE, "torch"), float("nan"), f"{TIME} nan: not a positive finite number"),
        (("times", CASE, "torch"), "0.02", f"{TIME} '0.02': not a positive finite number"),
        (("times", CASE, "torch"), True, f"{TIME} True: not a positive finite number"),
    ],
)
def test_a_store_entry_not_of_the_stores_form_stops_the_copy(source, stored, tmp_path, where, value, reason):
    entry = json.loads(stored.read_text())
    stored.write_text(json.dumps(edited(entry, where, value)))
    history = tmp_path / "history"
    history.mkdir()
    with pytest.raises(RejectedFile, match=rf"^{stored.relative_to(source).as_posix()}: {reason}"):
        copy_results(source, history)
    assert not any(history.iterdir()), "nothing is written when one file is refused"


@pytest.mark.parametrize(
    "name", ["references/rms_norm/notes.json", "references/rms_norm/0123456789abcdef.partial", "references/x.json"]
)
def test_the_store_holds_its_entries_alone(source, stored, tmp_path, name):
    (source / name).parent.mkdir(parents=True, exist_ok=True)
    (source / name).write_text(stored.read_text())
    with pytest.raises(RejectedFile, match=f"^{name}: not an asv result file nor a file of the references' store"):
        copy_results(source, tmp_path)
