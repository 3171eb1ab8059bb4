"""Generated code of the TileLang attention kernels, read without a GPU.

Each kernel is compiled for sm_90a with the local nvcc exactly as the launchers
compile it (``kernelgate.kernels.attention.ops``), then its CUDA source and SASS are read.
The backward's accumulation mode must show in the instructions:

* tma: bulk tensor reductions (``UTMAREDG ... ADD``), no register atomics;
* region: every accumulated element in a 128-bit reduction (``REDG.E.ADD.F32x4``):
  per-element atomics in its place fail here;
* elem: one scalar ``REDG.E.ADD.F32`` per element, nothing wider.

Runs in the compiled pytest process, CPU only; kernels compile once per session
into a fresh TILELANG_CACHE_DIR (~5-10 s each).
"""

import collections
import functools
import inspect
import re

import pytest
from tilelang.cuda.backend import tilelang_callback_cuda_compile

from kernelgate.cases.attention import CODEGEN_CASES, AttentionCase, attention_shape
from kernelgate.explain.compiled import sass
from kernelgate.kernels.attention import ACCUM_MODES, flash_attn_varlen_func, ops
from kernelgate.kernels.device import interpreter_mode

# One xdist worker compiles this module's kernels once (functools.cache, a disk cache per process).
pytestmark = [
    pytest.mark.skipif(interpreter_mode(), reason="compiled-mode check; runs in the other pytest process"),
    pytest.mark.xdist_group("attention-codegen"),
]

ARCH = "sm_90a"  # bare "cuda" would silently mean sm_50
# A reduction opcode with its modifiers, e.g. REDG.E.ADD.F32x4.FTZ.RN.STRONG.GPU or UTMAREDG.3D.ADD.
REDUCTION = re.compile(r"\b(?:UTMAREDG|REDG|ATOMG|RED|ATOM)(?:\.[0-9A-Za-z_]+)*")


@pytest.fixture(scope="session", autouse=True)
def fresh_tilelang_cache(tmp_path_factory):
    """A TileLang disk cache for this run only: nothing stale is read, nothing compiles twice."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TILELANG_CACHE_DIR", str(tmp_path_factory.mktemp("tilelang-cache")))
        yield


@functools.cache
def sass_of(kernel) -> str:
    """SASS of the cubin TileLang builds for ``kernel`` (read back from its binary cache)."""
    return sass(tilelang_callback_cuda_compile(kernel.get_kernel_source(), kernel.target, kernel.pass_configs))


def reductions(sass: str) -> collections.Counter:
    return collections.Counter(REDUCTION.findall(sass))


def count(found: collections.Counter, pattern: str) -> int:
    return sum(n for op, n in found.items() if re.fullmatch(pattern, op))


def accumulated_per_thread(case: AttentionCase) -> int:
    """Floats one compute thread adds: its share of a dQ tile and of the final dK and dV tiles."""
    t = ops.backward_tiles(case.dim_qk)
    return (t.block_n * case.dim_qk + t.block_m * (case.dim_qk + case.dim_v)) // t.threads


CASE_IDS = [c.name for c in CODEGEN_CASES]


@pytest.mark.parametrize("accum", ACCUM_MODES)
@pytest.mark.parametrize("case", CODEGEN_CASES, ids=CASE_IDS)
def test_backward_accumulates_with_the_mode_instructions(case, accum):
    kernel = ops.backward_kernel(attention_shape(case), accum, ARCH)
    source, found = kernel.get_kernel_source(), reductions(sass_of(kernel))
    per_thread = accumulated_per_thread(case)
    scalar, x2, x4 = (count(found, rf"REDG\.E\.ADD\.F32{w}\..*") for w in ("", "x2", "x4"))
    tma = count(found, r"UTMAREDG\..*ADD.*")
    print(f"{case.name} {accum}: {dict(found)}; {per_thread} floats per thread")
    if accum == "tma":
        assert tma >= 3 and scalar == x2 == x4 == 0, dict(found)
        assert source.count("tma_store_add(") == 3, "one TMA reduction site each for dQ, dK and dV"
    elif accum == "region":
        assert x4 * 4 == per_thread, f"every element in a 128-bit reduction: {dict(found)}"
        assert scalar == x2 == tma == 0, dict(found)
        assert "AtomicAddx4(" in source.split("__global__")[-1], "AtomicAddx4 calls in the kernel"
    else:
        assert scalar == per_thread, f"one scalar reduction per element: {dict(found)}"
        assert x2 == x4 == tma == 0, dict(found)
        kernel_body = source.split("__global__")[-1]
        assert "atomicAdd(" in kernel_body and "AtomicAddx" not in kernel_body, "scalar atomicAdd calls only"
    assert sum(found.values()) == scalar + x2 + x4 + tma, f"no other atomics: {dict(found)}"


@pytest.mark.parametrize("accum", ["tma", "elem"])
@pytest.mark.parametrize("case", CODEGEN_CASES, ids=CASE_IDS)
def test_backward_keeps_its_accumulators_in_registers(case, accum):
    """No register spills in the default backward tiles (region still spills the addresses of
    its vector atomics at 192/128, so it is not held to this)."""
    sass = sass_of(ops.backward_kernel(attention_shape(case), accum, ARCH))
    assert re.search(r"\bSTL\b", sass) is None, "no register spills"


@pytest.mark.parametrize("accum", ACCUM_MODES)
@pytest.mark.parametrize("case", CODEGEN_CASES, ids=CASE_IDS)
def test_backward_gives_the_producers_registers_to_the_compute_warps(case, accum):
    """The TMA producer warpgroup drops to 24 registers a thread and the two compute warpgroups rise to
    240 (setmaxnreg), where the kernel as launched gives every thread 168: the compute warps hold dK
    and dV (128 floats a thread at 128/128) beside a step's scores."""
    sass = sass_of(ops.backward_kernel(attention_shape(case), accum, ARCH))
    assert re.search(r"USETMAXREG\.DEALLOC\.CTAPOOL 0x18\b", sass), "the producer gives registers back, to 24"
    assert re.search(r"USETMAXREG\.TRY_ALLOC\.CTAPOOL \w+, 0xf0\b", sass), "the compute warps take 240"


def test_default_accumulation_is_the_tma_reduction():
    assert inspect.signature(flash_attn_varlen_func).parameters["accum"].default == "tma"


@pytest.mark.parametrize("case", CODEGEN_CASES, ids=CASE_IDS)
def test_forward_runs_on_wgmma_without_atomics(case):
    kernel = ops.forward_kernel(attention_shape(case), ARCH)
    sass = sass_of(kernel)
    assert re.search(r"\bHGMMA\.", sass), "sm_90a tensor-core MMAs (wgmma)"
    assert not reductions(sass), "the forward owns its output rows"
    assert re.search(r"\bSTL\b", sass) is None, "no register spills"


@pytest.mark.parametrize("case", CODEGEN_CASES[:1], ids=CASE_IDS[:1])
def test_backward_pre_and_postprocess_compile_without_atomics(case):
    shape = attention_shape(case)
    kernels = [ops.preprocess_kernel(shape, ARCH)] + [
        ops.postprocess_kernel(heads, dim, shape, ARCH)
        for heads, dim in ((case.heads, case.dim_qk), (case.heads_kv, case.dim_qk), (case.heads_kv, case.dim_v))
    ]
    for kernel in kernels:
        sass = sass_of(kernel)
        assert not reductions(sass) and re.search(r"\bSTL\b", sass) is None


def test_a_second_request_reuses_the_compiled_kernel():
    shape = attention_shape(CODEGEN_CASES[0])
    first = ops.preprocess_kernel(shape, ARCH)
    hits = ops.compile_kernel.cache_info().hits
    assert ops.preprocess_kernel(shape, ARCH) is first
    assert ops.compile_kernel.cache_info().hits == hits + 1
