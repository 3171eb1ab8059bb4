"""Machine-code checks for the LayerNorm kernels, compiled ahead of time for
sm_90 without a GPU (kernelgate.explain.compiled). They catch performance regressions a
CPU-only CI can see: lost 128-bit memory access and register spills.

Launches are built by the same functions the runtime uses, on meta tensors, so
the kernels, configurations and alignment hints checked here are the real ones.
"""

import dataclasses
import functools
import re

import pytest
import torch

from kernelgate.cases.common import DTYPES
from kernelgate.cases.layer_norm import BENCH_SHAPES
from kernelgate.explain.compiled import compile_sm90, opcodes, resource_usage, sass, spill_stores
from kernelgate.kernels.device import interpreter_mode
from kernelgate.kernels.layer_norm.config import (
    LaunchConfig,
    launch_config,
    launch_entries,
    read_tuned_table,
    tuned_file,
)
from kernelgate.kernels.layer_norm.ops import (
    backward_launch,
    column_grads_launch,
    column_sum_launch,
    forward_launch,
    row_words,
    select_variant,
)

# One xdist worker compiles this module's kernels once (functools.cache, a disk cache per process).
pytestmark = [
    pytest.mark.skipif(interpreter_mode(), reason="ahead-of-time compile: runs in the compiled pytest process"),
    pytest.mark.xdist_group("layer-norm-codegen"),
]


FORWARDS = ("fwd", "inference")


def _meta_launch(variant: str, direction: str, m: int, n: int, dt: torch.dtype, cfg: LaunchConfig):
    """The launch the runtime would build, on meta tensors. ``fwd`` is the training forward (it stores
    mean and rstd), ``inference`` the forward that does not (the kernel eval calls, the benchmarks and
    the tuner time); ``column_sum`` and ``column_grads`` are the backward's second kernel (after
    partial sums, and with ``column_grads``)."""
    x = torch.empty(m, n, dtype=dt, device="meta")
    w = torch.empty(n, dtype=dt, device="meta")
    stats = torch.empty(m, dtype=torch.float32, device="meta")
    if direction in FORWARDS:
        return forward_launch(x, w, w, 1e-5, variant, x, *(stats, stats) if direction == "fwd" else (None, None), cfg)
    if variant == "column_grads":
        return column_grads_launch(x, x, stats, stats, w, w)
    words = row_words(cfg.row_slices) if variant == "fused" and cfg.row_slices > 1 else 0  # as the eager forward left
    launch, partial = backward_launch(
        x, x, w, w, stats, stats, "fused" if variant == "column_sum" else variant, x, cfg, exchange_words=words
    )
    return column_sum_launch(partial, launch.grid[0], [w, w]) if variant == "column_sum" else launch


@functools.cache
def _asm(variant: str, direction: str, m: int, n: int, dtype: str, cfg: LaunchConfig) -> dict:
    """The launch compiled for sm_90: its TTGIR, PTX, cubin, ... by name."""
    return compile_sm90(_meta_launch(variant, direction, m, n, DTYPES[dtype], cfg)).asm


@functools.cache
def _compiled(variant: str, direction: str, m: int, n: int, dtype: str, cfg: LaunchConfig | None = None):
    """(SASS, resource usage, the launch's configuration: ``cfg``, else the launcher's own)."""
    cfg = cfg or launch_config(variant, _config_direction(direction), DTYPES[dtype], n, None)
    cubin = _asm(variant, direction, m, n, dtype, cfg)["cubin"]
    return sass(cubin), resource_usage(cubin), cfg


def _config_direction(direction: str) -> str:
    """The direction a launch looks its configuration up under: the two forwards share theirs."""
    return "fwd" if direction in FORWARDS else direction


def _tile_conversions(direction: str, n: int, dtype: str, cfg: LaunchConfig) -> list[str]:
    """Layout conversions of a whole [rows, columns] tile in the fused kernel's TTGIR: each moves
    the tile through shared memory, behind barriers, every row."""
    ttgir = _asm("fused", direction, 4096, n, dtype, cfg)["ttgir"]
    return re.findall(r"ttg\.convert_layout %\S+ : tensor<(\d+x\d+)x", ttgir)


def _row_load(variant: str, cfg: LaunchConfig) -> str:
    """The SASS of a 16-byte x/dy load: a cp.async copy into shared memory where a backward
    pipelines its loop (num_stages > 1), else a load into registers. (A pipelined kernel still
    loads the weight with LDG.E.128, so that alone would not show the rows kept their width.)"""
    return "LDGSTS.E.BYPASS.128" if cfg.num_stages > 1 else "LDG.E.128"


def _assert_no_spills(code: str, usage: dict, what: str) -> None:
    # The tuner's rule: a spilled register is stored to local memory. A stack frame alone is a call's
    # (the correctly rounded division's slow path, at 32 warps' 64-register ceiling: fp32 32768).
    assert usage["LOCAL"] == 0 and usage["STACK"] <= 8, f"{what} uses local memory: {usage}"
    assert spill_stores(code) == 0, f"{what} spills registers: {spill_stores(code)} stores to local memory"


@pytest.mark.parametrize("direction", ["fwd", "bwd"])
@pytest.mark.parametrize("variant", ["fused", "two_pass"])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_aligned_rows_use_128_bit_loads_and_stores(variant, direction, dtype):
    # N = 4096: every row starts 16-byte aligned and is a multiple of 16 elements.
    code, _, cfg = _compiled(variant, direction, 4096, 4096, dtype)
    assert _row_load(variant, cfg) in code, "x/dy loads lost their 128-bit width"
    assert "STG.E.128" in code, "y/dx stores lost their 128-bit width"
    narrow_stores = re.findall(r"STG\.E\.U?(?:16|8)\b", code)
    assert not narrow_stores, f"sub-word stores in an aligned row: {narrow_stores[:4]}"


@pytest.mark.parametrize("direction", [*FORWARDS, "bwd"])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize(("m", "n"), BENCH_SHAPES, ids=[f"{m}x{n}" for m, n in BENCH_SHAPES])
def test_auto_kernels_do_not_spill_registers(m, n, dtype, direction):
    variant = select_variant("auto", _config_direction(direction), DTYPES[dtype], n, None)
    code, usage, cfg = _compiled(variant, direction, m, n, dtype)
    _assert_no_spills(code, usage, str(cfg))


@pytest.mark.parametrize("direction", [*FORWARDS, "bwd"])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("n", [12288, 16384, 32768])
def test_auto_kernels_of_wide_rows_do_not_spill_registers(n, dtype, direction):
    # Past 8192 the rules change with the width: the fused forward's warps, two_pass's backward tile.
    variant = select_variant("auto", _config_direction(direction), DTYPES[dtype], n, None)
    code, usage, cfg = _compiled(variant, direction, 8192, n, dtype)
    _assert_no_spills(code, usage, str(cfg))


def test_spilled_registers_are_counted_as_stores_to_local_memory():
    # The rule the tuner drops configurations by: a 32768-wide fp32 row on 16 warps (64 values a
    # thread) spills, where the heuristic's 32 warps do not.
    spilled, usage, _ = _compiled("fused", "inference", 8192, 32768, "float32", LaunchConfig(1, 32768, 16))
    assert usage["STACK"] > 8 and spill_stores(spilled) > 0, usage
    heuristic, _, cfg = _compiled("fused", "inference", 8192, 32768, "float32")
    assert cfg.num_warps == 32 and spill_stores(heuristic) == 0


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("n", [18432, 20480, 24576])
def test_fused_forward_of_a_wide_row_in_two_pieces_keeps_one_layout(n, dtype):
    # Past 16384 a row that is not a power of two is a 16384-wide head plus a tail; the heuristic's warps
    # give the tail's threads whole 16-byte accesses too (18432's 2048-wide tail: 8 warps at 16 bits,
    # 16 at fp32), so the head's tile never moves into the tail's layout.
    code, usage, cfg = _compiled("fused", "fwd", 8192, n, dtype)
    assert not _tile_conversions("fwd", n, dtype, cfg), str(cfg)
    _assert_no_spills(code, usage, str(cfg))


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("n", [384, 640, 768, 896, 1152, 1280, 1536])
def test_fused_forward_of_a_short_row_keeps_one_layout(n, dtype):
    # Short rows run small programs of one or two warps (config.short_row_tile); a row split in two
    # pieces (768: 512 + 256 lanes) gives each thread of a warp whole 16-byte accesses of its tail, so
    # the head's tile never moves into the tail's layout.
    code, usage, cfg = _compiled("fused", "fwd", 8192, n, dtype)
    assert cfg.block_n < n or n not in (768, 1280, 1536), str(cfg)
    assert not _tile_conversions("fwd", n, dtype, cfg), str(cfg)
    assert _row_load("fused", cfg) in code and "STG.E.128" in code
    _assert_no_spills(code, usage, str(cfg))


@pytest.mark.parametrize("direction", ["fwd", "bwd"])
@pytest.mark.parametrize("variant", ["fused", "two_pass"])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_non_power_of_two_rows_keep_128_bit_access(variant, direction, dtype):
    # N = 5000 is a multiple of 8, so each row of a contiguous tensor starts
    # 16-byte aligned; the launcher's VEC hint must turn that into 16-byte access.
    code, _, cfg = _compiled(variant, direction, 4096, 5000, dtype)
    assert _row_load(variant, cfg) in code and "STG.E.128" in code


def _tuned_entries() -> list:
    """Every (GPU class, key, config) of the tuned table: the configurations GPUs actually run."""
    entries = launch_entries(read_tuned_table(tuned_file()))
    return [pytest.param(key, cfg, id=f"{gpu}-{key}") for gpu, key, cfg in entries]


# Parametrized over the entries, so an empty or missing table reports an empty
# parameter set (a skip), never a test that passed without checking anything.
@pytest.mark.parametrize(("key", "cfg"), _tuned_entries())
def test_tuned_configs_compile_without_spills_and_keep_128_bit_access(key, cfg):
    variant, direction, dtype, n = key.split("/")
    n = int(n)
    # 4096 rows: M enters the compiled code only through divisibility by 16.
    for compiled_as in FORWARDS if direction == "fwd" else (direction,):
        code, usage, _ = _compiled(variant, compiled_as, 4096, n, dtype, cfg)
        _assert_no_spills(code, usage, f"{key} {cfg} ({compiled_as})")
        if n % (16 // DTYPES[dtype].itemsize) == 0:  # every row starts 16-byte aligned
            assert _row_load(variant, cfg) in code and "STG.E.128" in code, f"{key} {cfg} lost 128-bit loads/stores"
    if variant == "fused":
        assert not _tile_conversions(direction, n, dtype, cfg), f"{key} {cfg} changes its tile's layout every row"


@pytest.mark.parametrize("direction", ["fwd", "bwd"])
def test_a_tail_piece_narrower_than_the_vectors_converts_the_tile(direction):
    # What the tuned-table check above guards against, seen: bf16 5000 as 4096 + 1024 at 8 warps
    # gives each thread 4 tail elements against 8 in the head, and the row's tile changes layout;
    # at 4 warps both pieces hold 8.
    cfg = LaunchConfig(1, 4096, 8, programs_per_sm=1, num_stages=3 if direction == "bwd" else 1)
    assert _tile_conversions(direction, 5000, "bfloat16", cfg) == ["1x4096"] * (2 if direction == "fwd" else 1)
    assert not _tile_conversions(direction, 5000, "bfloat16", dataclasses.replace(cfg, num_warps=4))


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_pipelined_fused_backward_loads_ahead_through_shared_memory(dtype):
    # num_stages > 1 must turn the x/dy loads into 16-byte cp.async copies, issued a
    # row block ahead; num_stages = 1 keeps plain register loads.
    for stages, async_copies in ((1, False), (2, True)):
        cfg = LaunchConfig(1, 8192, 16, programs_per_sm=1, num_stages=stages)
        code, usage, _ = _compiled("fused", "bwd", 4096, 8192, dtype, cfg)
        assert ("LDGSTS.E.BYPASS.128" in code) == async_copies, f"num_stages={stages}"
        _assert_no_spills(code, usage, f"num_stages={stages}")


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("n", [6144, 12288, 16384, 32768])
def test_two_pass_backward_past_8192_or_four_chunks(n, dtype):
    # The heuristic pipelines the chunk loops of fp32 rows past 8192 and of rows of four chunks or more:
    # their x and dy loads become 16-byte cp.async copies, two chunks ahead, without spills; shorter
    # rows load plainly. 16-bit rows past 8192 write dx alone (column_grads): pass 1 asks L2 to keep
    # x and dy (evict_last), pass 2 lets them go (evict_first), and no partial sums are stored.
    code, usage, cfg = _compiled("two_pass", "bwd", 8192, n, dtype)
    wide = n > 8192  # 6144: two chunks of 4096 (fp32), three of 2048 (16-bit)
    assert cfg.column_grads == (wide and dtype != "float32")
    pipelined = wide and not cfg.column_grads
    assert cfg.num_stages == (3 if pipelined else 1)
    assert ("LDGSTS.E.BYPASS.128" in code) == pipelined, str(cfg)
    hints = ("LDG.E.EL.128" in code, "LDG.E.EF.128" in code)
    assert hints == ((True, True) if cfg.column_grads else (False, False)), str(cfg)
    if cfg.column_grads:
        assert set(re.findall(r"\bSTG\.\S+", code)) == {"STG.E.128"}, "dx alone is stored"
    _assert_no_spills(code, usage, str(cfg))


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_column_grads_kernel_lets_the_rows_go_and_keeps_its_sums_in_registers(dtype):
    cfg = launch_config("two_pass", "bwd", DTYPES[dtype], 16384, None)
    code, usage, _ = _compiled("column_grads", "bwd", 8192, 16384, dtype, cfg)
    assert "LDG.E.EF" in code, "x and dy loaded evict_first"
    _assert_no_spills(code, usage, "column_grads")


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_fused_forward_options_change_the_code_as_intended(dtype):
    # preload_affine issues the w and b loads (evict_last: kept in L2) before the statistics' first
    # cross-warp exchange (BAR.SYNC), not after the last; single_reduction leaves one exchange where
    # there were two.
    def compiled(**options):
        cfg = LaunchConfig(1, 4096, 8, **options)
        code, usage, _ = _compiled("fused", "fwd", 4096, 4096, dtype, cfg)
        _assert_no_spills(code, usage, str(cfg))
        instructions = opcodes(code)
        barriers = [i for i, op in enumerate(instructions) if op.startswith("BAR.SYNC")]
        before = instructions[: barriers[0]]
        return before.count("LDG.E.128"), before.count("LDG.E.EL.128"), len(barriers)

    x_loads = 4096 * DTYPES[dtype].itemsize // 16 // (32 * 8)  # 16-byte loads per thread
    assert compiled()[:2] == (x_loads, 0)
    assert compiled(preload_affine=True)[:2] == (x_loads, 2 * x_loads), "w and b no longer load with x, evict_last"
    if dtype != "float32":
        assert compiled(single_reduction=True)[2] < compiled()[2]


@pytest.mark.parametrize("block_m", [1, 2])
def test_fused_forward_prefetch_is_one_bulk_prefetch_a_row(block_m):
    # One TMA bulk prefetch (UBLKPF.L2) per row, of the rows prefetch_rows later, and only with
    # prefetch_per_sm set: after the wait for the previous kernel, before the statistics' first
    # cross-warp exchange (BAR.SYNC). ptxas places it after the program's own loads are issued.
    def instructions(prefetch_per_sm):
        cfg = LaunchConfig(block_m, 4096, 4, prefetch_per_sm=prefetch_per_sm)
        code, usage, _ = _compiled("fused", "fwd", 4096, 5000, "bfloat16", cfg)
        _assert_no_spills(code, usage, str(cfg))
        return opcodes(code)

    assert not any(op.startswith("UBLKPF") for op in instructions(0))
    ops = instructions(2)
    prefetches = [i for i, op in enumerate(ops) if op.startswith("UBLKPF.L2")]
    barriers = [i for i, op in enumerate(ops) if op.startswith("BAR.SYNC")]
    assert len(prefetches) == block_m, ops
    assert ops.index("ACQBULK") < prefetches[0] and prefetches[-1] < barriers[0]


@pytest.mark.parametrize("block_m", [1, 2])
def test_fused_backward_prefetch_is_two_bulk_prefetches_a_row_in_the_pipelined_loop(block_m):
    # Each row-block step prefetches its x and dy rows prefetch_rows later (UBLKPF.L2, one per row
    # and tensor), between the cp.async copies of the loop's prologue and those of its body, and the
    # loop keeps its pipelined copies.
    def instructions(prefetch_per_sm):
        cfg = LaunchConfig(block_m, 4096, 8, programs_per_sm=1, num_stages=3, prefetch_per_sm=prefetch_per_sm)
        code, usage, _ = _compiled("fused", "bwd", 4096, 4096, "bfloat16", cfg)
        _assert_no_spills(code, usage, str(cfg))
        return opcodes(code)

    plain, ops = instructions(0), instructions(2)
    assert not any(op.startswith("UBLKPF") for op in plain)
    prefetches = [i for i, op in enumerate(ops) if op.startswith("UBLKPF.L2")]
    copies = [i for i, op in enumerate(ops) if op == "LDGSTS.E.BYPASS.128"]
    assert len(prefetches) == 2 * block_m, ops
    assert len(copies) == plain.count("LDGSTS.E.BYPASS.128")
    assert copies[0] < prefetches[0] and prefetches[-1] < copies[-1]


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_fused_backward_single_reduction_leaves_fewer_barriers(dtype):
    # Each cross-warp row sum costs barriers in every row block's iteration: c1's and c2's
    # sums in one reduction must leave fewer of them.
    def barriers(single_reduction):
        cfg = LaunchConfig(1, 8192, 8, programs_per_sm=1, num_stages=3, single_reduction=single_reduction)
        code, usage, _ = _compiled("fused", "bwd", 4096, 5000, dtype, cfg)
        _assert_no_spills(code, usage, str(cfg))
        return sum(op.startswith("BAR.SYNC") for op in opcodes(code))

    assert barriers(True) < barriers(False)


@pytest.mark.parametrize(("variant", "direction"), [("fused", "fwd"), ("column_sum", "bwd")])
def test_kernels_wait_for_their_predecessor_before_touching_memory(variant, direction):
    # Launched with programmatic dependent launch, a kernel runs while the previous one in the
    # stream drains: griddepcontrol.wait (ACQBULK) must come before every global load or store.
    # (The other kernels launch without it: triton_kernels' docstring says why.)
    cfg = launch_config("fused" if variant == "column_sum" else variant, direction, torch.float32, 4096, None)
    code, _, _ = _compiled(variant, direction, 4096, 4096, "float32", cfg)
    instructions = opcodes(code)
    wait = instructions.index("ACQBULK")
    memory = [i for i, op in enumerate(instructions) if re.match(r"(LDG|STG|LDGSTS|RED|ATOMG|UBLKPF)\b", op)]
    assert memory and wait < memory[0], (
        f"global memory accessed before griddepcontrol.wait: {instructions[: memory[0] + 1]}"
    )
    assert "PREEXIT" in instructions, "the next kernel is never let to launch early (griddepcontrol.launch_dependents)"


def test_fused_backward_neither_waits_for_nor_releases_another_kernel():
    # The persistent backward launches without programmatic dependent launch (ops.backward_launch
    # says why): no griddepcontrol.wait (ACQBULK) and no launch_dependents (PREEXIT).
    cfg = LaunchConfig(2, 4096, 8, programs_per_sm=1, num_stages=3)
    instructions = opcodes(_compiled("fused", "bwd", 4096, 4096, "bfloat16", cfg)[0])
    assert "PREEXIT" not in instructions and "ACQBULK" not in instructions


@pytest.mark.parametrize(
    ("dtype", "n", "slices"),
    [
        ("bfloat16", 12288, 2),
        ("bfloat16", 20480, 3),
        ("bfloat16", 32768, 4),
        ("float32", 16384, 2),
        ("float32", 32768, 4),
    ],
)
def test_row_slices_exchange_their_sums_without_a_fence(dtype, n, slices):
    # A slice publishes its two sums in one 64-bit store and waits on 128-bit polls of the row's words:
    # no fence, no atomic, no barrier around them, and the row-block loop still loads ahead. A 16-bit
    # row finishes a step late, so each appears twice: in the loop, and before it (publish) or after it (wait);
    # its loop prefetches its slice of x and dy (one bulk prefetch each); fp32's, which polls right after
    # publishing, the next row's words.
    code, usage, cfg = _compiled("fused", "bwd", 8192, n, dtype)
    assert cfg.row_slices == slices
    _assert_no_spills(code, usage, str(cfg))
    ops = opcodes(code)
    stores, polls = ops.count("STG.E.64.STRONG.GPU"), ops.count("LDG.E.128.STRONG.SYS")
    sites = 2 if dtype == "bfloat16" else 1
    assert (stores, polls) == (sites * (2 if slices == 3 else 1), sites * (1 if slices == 2 else 2)), (stores, polls)
    assert not [op for op in ops if op.startswith(("MEMBAR", "FENCE", "ATOM", "RED"))]
    assert ops.count("UBLKPF.L2") == (2 if dtype == "bfloat16" else 1)
    assert "LDGSTS.E.BYPASS.128" in ops, "the row-block loop no longer loads ahead"
