"""What the numbers were measured on: GPU, driver, clock and power settings, package versions.

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
import sys

SMOKE_MACHINE = "cpu-smoke-interpreter"


def _version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


# nvidia-smi's fields for the settings that change a GPU's timings, by device key: the driver, the
# SM clock applications run at, the highest SM clock the GPU may boost to, and the power limit.
NVIDIA_SMI_FIELDS = {
    "gpu_driver": "driver_version",
    "gpu_app_clock_sm": "clocks.applications.graphics",
    "gpu_sm_clock_max": "clocks.max.sm",
    "gpu_power_limit": "power.limit",
}


def _nvidia_smi() -> dict[str, str]:
    """The first GPU's settings, in one call; "unknown" for all of them when nvidia-smi cannot say."""
    query = ",".join(NVIDIA_SMI_FIELDS.values())
    try:
        out = subprocess.run(
            ["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader"],
            capture_output=True, text=True, check=True, timeout=30,
        )  # fmt: skip
        values = [value.strip() for value in out.stdout.splitlines()[0].split(",")]
    except (OSError, subprocess.SubprocessError, IndexError):
        values = []
    if len(values) != len(NVIDIA_SMI_FIELDS):
        values = ["unknown"] * len(NVIDIA_SMI_FIELDS)
    return dict(zip(NVIDIA_SMI_FIELDS, values, strict=True))


def device_info() -> dict[str, str]:
    import torch  # here: the PR check's processes that only read results import this module without it

    from kernelgate.kernels.device import gpu_class

    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none (Triton interpreter)"
    settings = _nvidia_smi() if torch.cuda.is_available() else dict.fromkeys(NVIDIA_SMI_FIELDS, "none")
    return {
        "gpu": gpu,
        "gpu_class": gpu_class(gpu) if torch.cuda.is_available() else "interpreter",
        **settings,
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


def machine_entry() -> dict:
    """This runner as asv's machine file records it, with the GPU and package versions (device_info)."""
    from asv.machine import Machine

    info = device_info()
    python = f"{sys.version_info.major}.{sys.version_info.minor}"
    return {**Machine.get_defaults(), **info, "machine": machine_name(info), "python": python}


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
