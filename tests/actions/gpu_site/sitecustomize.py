"""On PYTHONPATH of the stood-in GPU runner's processes (tests/actions/gpu_runner.py): in a process of the
PR check (``python -m kernelgate.prcheck``) it stands in for the GPU parts; in any other it does nothing."""

import os
import sys


def _runs_the_pr_check() -> bool:
    argv = getattr(sys, "orig_argv", [])
    return "-m" in argv[:-1] and argv[argv.index("-m") + 1] == "kernelgate.prcheck"


if os.environ.get("KERNELGATE_GPU_STANDIN") and _runs_the_pr_check():
    import importlib.util

    _spec = importlib.util.spec_from_file_location(
        "kernelgate_gpu_standin", os.path.join(os.path.dirname(os.path.dirname(__file__)), "gpu_runner.py")
    )
    _module = importlib.util.module_from_spec(_spec)
    sys.modules[_spec.name] = _module
    _spec.loader.exec_module(_module)
    _module.install()
