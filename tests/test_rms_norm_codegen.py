"""Machine-code checks for the RMSNorm kernels, compiled ahead of time for sm_90 without a GPU
(kernelgate.explain.compiled): lost 128-bit memory access, register spills, and the wait for the previous
kernel under programmatic dependent launch.

Launches are built by the same functions the runtime uses, on meta tensors, so the kernels,
configurations and alignment hints checked here are the real ones.
"""

import functools
import re

import pytest
import torch

from kernelgate.cases.common import DTYPES
from kernelgate.cases.rms_norm import MODEL_WIDTHS
from kernelgate.explain.compiled import compile_sm90, resource_usage, sass, spill_stores
from kernelgate.kernels.device import interpreter_mode
from kernelgate.kernels.layer_norm.ops import column_sum_launch
from kernelgate.kernels.rms_norm.config import MAX_SHARED_BYTES, RMSNormConfig, heuristic_config
from kernelgate.kernels.rms_norm.ops import backward_launch, forward_launch, groups_of

# One xdist worker compiles this module's kernels once (functools.cache, a disk cache per process).
pytestmark = [
    pytest.mark.skipif(interpreter_mode(), reason="ahead-of-time compile: runs in the compiled pytest process"),
    pytest.mark.xdist_group("rms-norm-codegen"),
]

# "fwd" is the training forward (it stores rstd), "inference" the one that does not, "bwd" the backward's
# row kernel and "column_sum" its second kernel, which sums the partial rows of dw.
DIRECTIONS = ("fwd", "inference", "bwd")


def _meta_launch(direction: str, m: int, n: int, dt: torch.dtype, cfg: RMSNormConfig | None):
    """The launch the runtime would build, on meta tensors."""
    x = torch.empty(m, n, dtype=dt, device="meta")
    w = torch.empty(n, dtype=dt, device="meta")
    rstd = torch.empty(m, dtype=torch.float32, device="meta")
    if direction in ("fwd", "inference"):
        return forward_launch(x, w, 1e-6, x, rstd if direction == "fwd" else None, cfg)
    launch, partial = backward_launch(x, x, w, rstd, x, cfg)
    return column_sum_launch(partial, groups_of(launch), [w]) if direction == "column_sum" else launch


def _config(direction: str, n: int, dtype: str) -> RMSNormConfig:
    return heuristic_config("fwd" if direction in ("fwd", "inference") else "bwd", DTYPES[dtype], n)


@functools.cache
def _kernel(direction: str, m: int, n: int, dtype: str, cfg: RMSNormConfig):
    """The launch compiled for sm_90 (``.asm``: its PTX, cubin, ...; ``.metadata.shared``: bytes a block takes)."""
    return compile_sm90(_meta_launch(direction, m, n, DTYPES[dtype], cfg))


@functools.cache
def _compiled(direction: str, m: int, n: int, dtype: str, cfg: RMSNormConfig | None = None):
    """(SASS, resource usage, the launch's configuration: ``cfg``, else the heuristic's)."""
    cfg = cfg or _config(direction, n, dtype)
    cubin = _kernel(direction, m, n, dtype, cfg).asm["cubin"]
    return sass(cubin), resource_usage(cubin), cfg


def _opcodes(code: str) -> list[str]:
    """The SASS opcodes in program order (predicates dropped)."""
    return re.findall(r"/\*[0-9a-f]{4}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)", code)


def _row_load(cfg: RMSNormConfig) -> str:
    """The SASS of a 16-byte x/dy load: a cp.async copy into shared memory where a backward pipelines its
    loop (num_stages > 1), else a load into registers."""
    return "LDGSTS.E.BYPASS.128" if cfg.num_stages > 1 else "LDG.E.128"


def _assert_no_spills(code: str, usage: dict, what: str) -> None:
    # A spilled register is stored to local memory; a stack frame alone is a call's (the correctly rounded
    # division's slow path).
    assert usage["LOCAL"] == 0 and usage["STACK"] <= 8, f"{what} uses local memory: {usage}"
    assert spill_stores(code) == 0, f"{what} spills registers: {spill_stores(code)} stores to local memory"


def _assert_128_bit_rows(code: str, cfg: RMSNormConfig, what: str) -> None:
    assert _row_load(cfg) in code, f"{what}: x/dy loads lost their 128-bit width"
    assert "STG.E.128" in code, f"{what}: y/dx stores lost their 128-bit width"
    narrow = re.findall(r"STG\.E\.U?(?:16|8)\b", code)
    assert not narrow, f"{what}: sub-word stores in an aligned row: {narrow[:4]}"


@pytest.mark.parametrize("direction", DIRECTIONS)
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("n", MODEL_WIDTHS)
def test_model_widths_keep_128_bit_access_without_spills(n, dtype, direction):
    # Every model width is a multiple of 16 elements: rows start 16-byte aligned, so every access to x, y,
    # dy and dx is 128 bits wide, one pass or looped (the backward past 8192 columns).
    code, usage, cfg = _compiled(direction, 8192, n, dtype)
    _assert_no_spills(code, usage, f"{direction} {cfg}")
    _assert_128_bit_rows(code, cfg, f"{direction} {cfg}")


@pytest.mark.parametrize("direction", DIRECTIONS)
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("n", [5000, 65536, 100000])
def test_other_widths_keep_128_bit_access_without_spills(n, dtype, direction):
    # 5000 is a multiple of 8 but not of 16: the launcher's VEC hint must give it 16-byte access too.
    # 65536 and 100000 loop in both directions.
    code, usage, cfg = _compiled(direction, 4096, n, dtype)
    _assert_no_spills(code, usage, f"{direction} {cfg}")
    _assert_128_bit_rows(code, cfg, f"{direction} {cfg}")


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("n", [1024, 4096, 8192, 16384, 32768])
def test_pipelined_backwards_fit_the_shared_memory_of_every_target(n, dtype):
    # The backward's pipeline stages hold x and dy in shared memory: the heuristic's must fit a block on
    # sm_80 (163 KiB) as on sm_90, or the launch fails there (out of resources).
    cfg = _config("bwd", n, dtype)
    shared = _kernel("bwd", 8192, n, dtype, cfg).metadata.shared
    assert cfg.num_stages > 1 and 0 < shared <= MAX_SHARED_BYTES, f"{cfg}: {shared} bytes of shared memory"


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_column_sum_keeps_its_sums_in_registers(dtype):
    code, usage, _ = _compiled("column_sum", 8192, 4096, dtype, heuristic_config("bwd", DTYPES[dtype], 4096))
    _assert_no_spills(code, usage, "column_sum")


@pytest.mark.parametrize("n", [4096, 32768])
def test_the_one_pass_forward_waits_for_its_predecessor_before_touching_memory(n):
    # Launched with programmatic dependent launch, the forward runs while the previous kernel in the stream
    # drains: griddepcontrol.wait (ACQBULK) must come before every global load or store, and it must let the
    # next kernel launch early (griddepcontrol.launch_dependents: PREEXIT).
    instructions = _opcodes(_compiled("fwd", 4096, n, "bfloat16")[0])
    wait = instructions.index("ACQBULK")
    memory = [i for i, op in enumerate(instructions) if re.match(r"(LDG|STG|LDGSTS|RED|ATOMG)\b", op)]
    assert memory and wait < memory[0], f"global memory accessed before griddepcontrol.wait: {instructions[:20]}"
    assert "PREEXIT" in instructions


@pytest.mark.parametrize("n", [4096, 16384])
def test_backwards_neither_wait_for_nor_release_another_kernel(n):
    # The persistent backwards launch without programmatic dependent launch (triton_kernels says why).
    instructions = _opcodes(_compiled("bwd", 4096, n, "bfloat16")[0])
    assert "PREEXIT" not in instructions and "ACQBULK" not in instructions


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_pipelined_backward_loads_ahead_through_shared_memory(dtype):
    # num_stages > 1 turns the x/dy loads into 16-byte cp.async copies issued steps ahead; 1 keeps plain
    # register loads. One pass (a row block a step) and looped (a chunk a step).
    for n, block_n in ((4096, 4096), (16384, 2048)):
        for stages, async_copies in ((1, False), (3, True)):
            cfg = RMSNormConfig(2, block_n, 8, num_stages=stages)
            code, usage, _ = _compiled("bwd", 4096, n, dtype, cfg)
            assert ("LDGSTS.E.BYPASS.128" in code) == async_copies, f"{n} num_stages={stages}"
            _assert_no_spills(code, usage, str(cfg))


@pytest.mark.parametrize(
    ("dtype", "n", "slices"), [("bfloat16", 12288, 2), ("bfloat16", 20480, 3), ("float32", 32768, 4)]
)
def test_row_slices_exchange_their_sums_without_a_fence(dtype, n, slices):
    # A slice publishes its row sum in one 64-bit store and waits on 128-bit polls of the row's words (the
    # LayerNorm's exchange): no fence, no atomic, no barrier around them, and the row loop still loads ahead.
    # A 16-bit row finishes a step late, so each appears twice: in the loop, and before it (publish) or after
    # it (wait). Each loop prefetches its slice of x and dy (one bulk prefetch each).
    code, usage, cfg = _compiled("bwd", 8192, n, dtype)
    assert cfg.row_slices == slices
    _assert_no_spills(code, usage, str(cfg))
    _assert_128_bit_rows(code, cfg, str(cfg))
    ops = _opcodes(code)
    stores, polls = ops.count("STG.E.64.STRONG.GPU"), ops.count("LDG.E.128.STRONG.SYS")
    sites = 2 if dtype == "bfloat16" else 1
    assert (stores, polls) == (sites * (2 if slices == 3 else 1), sites * (1 if slices == 2 else 2)), (stores, polls)
    assert not [op for op in ops if op.startswith(("MEMBAR", "FENCE", "ATOM", "RED"))]
    assert ops.count("UBLKPF.L2") == 2
