"""What the results-persisting job lets into the history branch: asv's result files, nothing else."""

import json
import os

import pytest

from kernelgate.report.history import RejectedFile, copy_results, main

RESULT = {"version": 2, "commit_hash": "a" * 40, "params": {}, "results": {}}


@pytest.fixture()
def source(tmp_path):
    root = tmp_path / "artifact"
    (root / "h100-host").mkdir(parents=True)
    (root / "benchmarks.json").write_text(json.dumps({"version": 2}))
    (root / "h100-host" / "machine.json").write_text(json.dumps({"version": 1, "machine": "h100-host"}))
    (root / "h100-host" / "aaaaaaaa-existing-py_python3.json").write_text(json.dumps(RESULT))
    return root


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
