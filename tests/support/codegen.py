"""Compile Triton launches ahead of time for sm_90, with no GPU, and read the
machine code of any kernel's cubin (Triton's or TileLang's): the cheap way to
catch performance regressions (lost vector width, register spills) on a
CPU-only CI machine.
"""

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


def _signature(launch: Launch) -> tuple[dict, dict]:
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
    signature, attrs = _signature(launch)
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
