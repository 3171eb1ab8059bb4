"""What the numbers were measured on: GPU, driver and package versions.

asv's machine file has no GPU field, so ``register_asv_machine`` adds these
keys to the machine's entry; asv copies every machine key into the ``params``
of each result file, where the gate and the published history can read them.

``python -m kernelgate.measure.device_info`` registers the machine and prints its name.
"""

import argparse
import importlib.metadata
import json
import platform
import subprocess

import torch

SMOKE_MACHINE = "cpu-smoke-interpreter"


def _version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def _driver() -> str:
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True, text=True, check=True, timeout=30,
        )  # fmt: skip
        return out.stdout.strip().splitlines()[0]
    except (OSError, subprocess.SubprocessError, IndexError):
        return "unknown"


def device_info() -> dict[str, str]:
    from kernelgate.kernels.device import gpu_class

    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none (Triton interpreter)"
    return {
        "gpu": gpu,
        "gpu_class": gpu_class(gpu) if torch.cuda.is_available() else "interpreter",
        "gpu_driver": _driver() if torch.cuda.is_available() else "none",
        "cuda": torch.version.cuda or "none",
        "torch": torch.__version__,
        "triton": _version("triton"),
        "tilelang": _version("tilelang"),
    }


def machine_name(info: dict[str, str]) -> str:
    """GPU results are filed per GPU class and host; smoke results never mix with them."""
    if info["gpu_class"] == "interpreter":
        return SMOKE_MACHINE
    return f"{info['gpu_class'].lower()}-{platform.node()}"


def register_asv_machine(name: str | None = None) -> str:
    """Write this machine's asv entry (asv's defaults plus the device keys); return its name."""
    from asv.machine import Machine, MachineCollection

    info = device_info()
    name = name or machine_name(info)
    entry = {**Machine.get_defaults(), **info, "machine": name}
    MachineCollection.save(name, entry)
    return name


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--machine", help="asv machine name (default: GPU class and host name)")
    parser.add_argument("--json", action="store_true", help="print the device keys as JSON instead")
    args = parser.parse_args()
    if args.json:
        print(json.dumps(device_info(), indent=2))
    else:
        print(register_asv_machine(args.machine))


if __name__ == "__main__":
    main()
