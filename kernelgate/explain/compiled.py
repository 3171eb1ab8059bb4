"""What a launch compiles to, ahead of time for sm_90 and with no GPU: its machine code, the resources a program
takes, the occupancy they allow, and its mix of instructions. The codegen tests assert on it, and a red verdict
compares base's kernels with head's by it (``kernelgate.explain.diff``).

Triton launches are compiled from the ``Launch`` the runtime's own launchers build (on meta tensors, which stand
for an sm_90 device); any cubin, TileLang's too, can be read.
"""

import collections
import dataclasses
import functools
import re
import subprocess
import tempfile
from pathlib import Path

import torch
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from kernelgate.kernels.launch import Launch

SM90 = GPUTarget("cuda", 90, 32)
_TRITON_TYPES = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16"}

# An sm_90 SM: what limits how many programs (thread blocks) it holds at once.
SM90_REGISTERS, SM90_THREADS, SM90_BLOCKS, SM90_SHARED = 65536, 2048, 32, 233472
SM90_REGISTER_UNIT = 8  # registers a thread is allocated in (256 a warp)
SM90_SHARED_RESERVED = 1024  # shared memory the system takes per block


def argument_types(launch: Launch) -> tuple[dict, dict]:
    """Argument types, and the divisibility-16 hints Triton's JIT would derive
    for the same values (pointers from the caching allocator are aligned; ints
    that are multiples of 16 are specialized, unless the kernel opts out)."""
    values = launch.arguments
    signature, attrs = {}, {}
    for i, (name, param) in enumerate(zip(launch.kernel.arg_names, launch.kernel.params, strict=True)):
        if name in launch.constexprs:
            signature[name] = "constexpr"
            continue
        value = values[name]
        if isinstance(value, torch.Tensor):
            signature[name] = "*" + _TRITON_TYPES[value.dtype]
            attrs[(i,)] = [["tt.divisibility", 16]]
        elif isinstance(value, int):
            signature[name] = "i32"
            if value % 16 == 0 and not param.do_not_specialize:
                attrs[(i,)] = [["tt.divisibility", 16]]
        else:
            signature[name] = "fp32"
    return signature, attrs


def compile_sm90(launch: Launch):
    """The compiled kernel (``.asm`` holds ttir, ttgir, llir, ptx and cubin), as an sm_90 device
    launches it: the launchers build launches on meta tensors as for one (``ops.pdl_of``, the
    fused forward's prefetch)."""
    signature, attrs = argument_types(launch)
    source = ASTSource(launch.kernel, signature, constexprs=launch.constexprs, attrs=attrs)
    return triton.compile(source, target=SM90, options={"num_warps": launch.num_warps, "launch_pdl": launch.pdl})


@functools.cache
def _cuobjdump() -> str:
    return str(Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump")


def _cuobjdump_run(cubin: bytes, flag: str) -> str:
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        return subprocess.run([_cuobjdump(), flag, f.name], check=True, capture_output=True, text=True).stdout


def sass(cubin: bytes) -> str:
    return _cuobjdump_run(cubin, "--dump-sass")


def opcodes(code: str) -> list[str]:
    """The opcodes of SASS ``code`` in program order (predicates dropped)."""
    return re.findall(r"/\*[0-9a-f]{4}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)", code)


def resource_usage(cubin: bytes) -> dict[str, int]:
    """Registers, stack frame and local memory per thread, shared memory per block."""
    text = _cuobjdump_run(cubin, "--dump-resource-usage")
    return {key: int(val) for key, val in re.findall(r"\b(REG|STACK|SHARED|LOCAL):(\d+)", text)}


def spill_stores(sass: str) -> int:
    """Stores to local memory (STL) in a kernel's SASS: how its spilled registers leave the register file."""
    return len(re.findall(r"\bSTL(?:\.[A-Z0-9]+)*\s", sass))


# The instruction classes a kernel's mix counts, by opcode: the first pattern an opcode matches names it.
# Global loads and stores are told apart by their width (no suffix: 32 bits).
MIX = (
    ("cp.async 128", r"LDGSTS\..*128"),
    ("cp.async", r"LDGSTS"),
    ("TMA", r"UTMALDG|UTMASTG|UTMAREDG|UBLKCP|UBLKRED"),
    ("L2 prefetch", r"UBLKPF|CCTL"),
    ("load 128", r"LDG\..*128"),
    ("load 64", r"LDG\..*64"),
    ("load", r"LDG"),
    ("store 128", r"STG\..*128"),
    ("store 64", r"STG\..*64"),
    ("store", r"STG"),
    ("local", r"LDL|STL"),
    ("atomic/reduction", r"ATOMG|ATOMS|ATOM|REDG|RED\b|RED\."),
    ("tensor core", r"HGMMA|WGMMA|HMMA|IMMA|QGMMA"),
    ("barrier", r"BAR\b|BAR\.|SYNCS|MEMBAR|FENCE"),
    ("shared", r"LDS|STS|LDSM"),
)


def instruction_mix(code: str) -> dict[str, int]:
    """The count of each ``MIX`` class in SASS ``code``, and ``total``, every instruction."""
    counts: collections.Counter = collections.Counter()
    ops = opcodes(code)
    for op in ops:
        name = next((name for name, pattern in MIX if re.match(pattern, op)), None)
        if name is not None:
            counts[name] += 1
    return {**{name: counts[name] for name, _ in MIX}, "total": len(ops)}


def occupancy(registers: int, shared: int, threads: int) -> int:
    """Programs an sm_90 SM holds at once, for a program of ``threads`` threads taking ``registers`` a thread and
    ``shared`` bytes of shared memory: the least of the register, thread, block and shared-memory limits."""
    allocated = -(-max(registers, 1) // SM90_REGISTER_UNIT) * SM90_REGISTER_UNIT
    limits = [SM90_REGISTERS // (allocated * threads), SM90_THREADS // threads, SM90_BLOCKS]
    if shared:
        limits.append(SM90_SHARED // (shared + SM90_SHARED_RESERVED))
    return max(0, min(limits))


@dataclasses.dataclass(frozen=True)
class KernelCode:
    """What one kernel a case launches compiled to."""

    kernel: str  # its name
    warps: int
    registers: int  # a thread's
    spill_stores: int  # stores to local memory
    local_bytes: int  # a thread's local memory (spills, a stack frame)
    shared_bytes: int  # a program's, static and dynamic
    occupancy: int  # programs an SM holds at once (``occupancy``)
    mix: dict[str, int]  # ``instruction_mix``


def kernel_code(launch: Launch) -> KernelCode:
    """What ``launch``'s kernel compiles to for sm_90."""
    compiled = compile_sm90(launch)
    cubin = compiled.asm["cubin"]
    code, usage = sass(cubin), resource_usage(cubin)
    shared = max(usage.get("SHARED", 0), compiled.metadata.shared)
    return KernelCode(
        kernel=compiled.metadata.name, warps=launch.num_warps, registers=usage.get("REG", 0),
        spill_stores=spill_stores(code), local_bytes=usage.get("LOCAL", 0), shared_bytes=shared,
        occupancy=occupancy(usage.get("REG", 0), shared, 32 * launch.num_warps), mix=instruction_mix(code),
    )  # fmt: skip
