"""asv configurations for smoke runs without a GPU, derived from asv.conf.json
so the smoke exercises the real suite and settings, only with its own paths,
the local Python and a CPU torch."""

import json
import platform
from pathlib import Path

from asv.util import load_json

ROOT = Path(__file__).resolve().parents[1]
SMOKE_TORCH = "2.13.0"  # a CPU build; GPU history pins its own torch in asv.conf.json


def smoke_config(work: Path, repo: Path = ROOT, environment_type: str = "existing") -> Path:
    """Write an asv config under ``work`` that keeps results, html and envs there."""
    conf = load_json(str(ROOT / "asv.conf.json"), js_comments=True)
    conf.update(
        repo=str(repo),
        benchmark_dir=str(repo / "benchmarks"),
        results_dir=str(work / "results"),
        html_dir=str(work / "html"),
        env_dir=str(work / "env"),
        environment_type=environment_type,
        pythons=[platform.python_version().rsplit(".", 1)[0]],
    )
    conf["matrix"]["req"]["torch"] = [SMOKE_TORCH]
    # Triton 3.6's interpreter needs numpy < 2.4 (array-to-scalar conversion).
    conf["matrix"]["req"]["numpy"] = ["2.3.5"]
    path = work / "asv.smoke.conf.json"
    work.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(conf, indent=2))
    return path
