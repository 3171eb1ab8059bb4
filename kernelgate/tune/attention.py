"""Sweep the tiles of the TileLang attention backward on the GPU.

    python -m kernelgate.tune.attention [--configs NAME ...] [--jobs N]

For each benchmark config (``kernelgate.cases.attention.BENCH_CONFIGS``) it compiles the
candidate backward ``Tiles`` below for every accumulation mode in parallel processes,
into one TileLang disk cache (``TILELANG_CACHE_DIR``, a temporary folder unless set),
then, in this process, times the backward (preprocess + main + postprocess, as asv's
``time_backward``) with ``kernelgate.measure.timing.median_ms``: every candidate with ``tma``, and
all three modes for the fastest and for the current default (``ops.backward_tiles``).
Every timed run's dq/dk/dv must match the default tiles' tma output within the case's
tolerance (relative L2), or it is marked WRONG and never picked. torch's FA2 varlen
backward is timed beside it where d_qk == d_v. Prints a markdown table per config.
"""

import argparse
import os
import sys
import tempfile

import torch

from kernelgate import cli
from kernelgate.cases.attention import (
    BENCH_CONFIGS,
    AttentionCase,
    attention_backward_workload,
    attention_shape,
    rel_l2,
)
from kernelgate.measure.parallel import default_jobs, in_worker_processes

# (dim_qk, dim_v) -> (block_m, block_n, num_stages, threads) besides the default, compiled
# offline for sm_90a (all fit shared memory); the comments count the spill stores (STL) in
# the tma kernel's SASS (the defaults have none, but for one in the 128/128 causal kernel).
CANDIDATES = {
    (192, 128): [
        (128, 32, 2, 256),  # 14 STL; the public TileLang example's tiles
        (64, 32, 1, 128),  # 0 STL, one compute warpgroup
    ],
    (128, 128): [
        (128, 32, 1, 256),  # 0 STL
        (128, 48, 1, 256),  # 0 STL
        (128, 48, 2, 256),  # 0 STL
        (128, 64, 2, 256),  # 12-14 STL
        (64, 32, 2, 128),  # 0-2 STL, one compute warpgroup
    ],
    (64, 64): [
        (128, 64, 2, 256),  # 0 STL
        (128, 64, 1, 256),  # 0 STL
        (128, 64, 3, 256),  # 0 STL
        (64, 64, 2, 128),  # 0 STL, one compute warpgroup
        (64, 32, 2, 128),  # 0 STL, one compute warpgroup
    ],
}
MODES = ("tma", "region", "elem")


def candidates(case: AttentionCase) -> list:
    from kernelgate.kernels.attention import ops

    default = ops.backward_tiles(case.dim_qk)
    tiles = [ops.Tiles(*t) for t in CANDIDATES.get((case.dim_qk, case.dim_v), [])]
    return [default] + [t for t in tiles if t != default]


def compile_one(job) -> str:
    """Compile (in a worker process) one main kernel and the postprocess kernels for its padding."""
    name, accum, tiles, arch = job
    from kernelgate.kernels.attention import ops

    case = BENCH_CONFIGS[name]
    shape = attention_shape(case)
    ops.backward_kernel(shape, accum, arch, tiles)
    for heads, dim in ((case.heads, case.dim_qk), (case.heads_kv, case.dim_qk), (case.heads_kv, case.dim_v)):
        ops.postprocess_kernel(heads, dim, shape, arch, tiles.pad)
    ops.forward_kernel(shape, arch)
    ops.preprocess_kernel(shape, arch)
    return f"{name} {accum} {tiles}"


def compile_all(names: list[str], arch: str, jobs: int) -> None:
    work = [(name, accum, t, arch) for name in names for t in candidates(BENCH_CONFIGS[name]) for accum in MODES]
    print(f"compiling {len(work)} kernels in {jobs} processes (TILELANG_CACHE_DIR={os.environ['TILELANG_CACHE_DIR']})")
    for _, done, err in in_worker_processes(compile_one, work, jobs):
        if err is not None:
            raise SystemExit(f"compile failed: {err!r}")
        print(f"  compiled {done}", flush=True)


def sweep(name: str) -> None:
    from kernelgate.kernels.attention.ops import attention_backward, attention_forward
    from kernelgate.measure import timing
    from kernelgate.measure.workloads import warmed

    case = BENCH_CONFIGS[name]
    inp = case.make_inputs("cuda")
    q, k, v, do = inp["q"], inp["k"], inp["v"], inp["do"]
    cu_q, cu_k, max_q, max_k = inp["cu_seqlens_q"], inp["cu_seqlens_k"], inp["max_seqlen_q"], inp["max_seqlen_k"]
    o, lse = attention_forward(q, k, v, cu_q, cu_k, max_q, case.causal)

    def backward(accum, tiles):
        return lambda: attention_backward(
            do, q, k, v, o, lse, cu_q, cu_k, max_q, max_k, case.causal, accum=accum, tiles=tiles
        )

    tiles_list = candidates(case)
    default = tiles_list[0]
    reference = backward("tma", default)()
    ms, err = {}, {}

    def measure(accum, tiles):
        fn = backward(accum, tiles)
        err[accum, tiles] = max(
            rel_l2(g, r) / case.tolerance(n) for g, r, n in zip(fn(), reference, ("dq", "dk", "dv"), strict=True)
        )
        ms[accum, tiles] = timing.median_ms(warmed(fn))

    for t in tiles_list:
        measure("tma", t)
    correct = [t for t in tiles_list if err["tma", t] <= 1]
    best = min(correct, key=lambda t: ms["tma", t]) if correct else default
    for t in dict.fromkeys((default, best)):
        for accum in MODES[1:]:
            measure(accum, t)
    fa2_ms = None
    if case.dim_qk == case.dim_v:
        fa2_ms = timing.median_ms(warmed(attention_backward_workload(case, "fa2_varlen")))

    flops = case.flops_backward()
    print(f"\n### {name}\n")
    if fa2_ms is not None:
        print(f"torch varlen FA2: {fa2_ms:.3f} ms, {timing.tflops(flops, fa2_ms):.0f} TFLOP/s\n")
    print(
        "| block_m | block_n | stages | threads | tma ms | region ms | elem ms | tma TFLOP/s | FA2 / tma | err/tol | |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for t in tiles_list:
        cells = [f"{ms[a, t]:.3f}" if (a, t) in ms else "" for a in MODES]
        ratio = f"{fa2_ms / ms['tma', t]:.2f}x" if fa2_ms is not None else "n/a"
        worst = max(e for (a, tt), e in err.items() if tt == t)
        note = " ".join(s for s, on in (("default", t == default), ("**best**", t == best), ("WRONG", worst > 1)) if on)
        print(
            f"| {t.block_m} | {t.block_n} | {t.num_stages} | {t.threads} | {' | '.join(cells)} "
            f"| {timing.tflops(flops, ms['tma', t]):.0f} | {ratio} | {worst:.2f} | {note} |"
        )
    print(f"\nbest for {name}: {best}" + (" (the default)" if best == default else ""))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--configs", nargs="+", default=list(BENCH_CONFIGS), choices=list(BENCH_CONFIGS))
    parser.add_argument("--jobs", type=cli.positive_int, default=default_jobs(14), help="compile processes")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        sys.exit("kernelgate.tune.attention: no CUDA GPU visible; this sweep times kernels on an sm_90 GPU")
    capability = torch.cuda.get_device_capability()
    if capability < (9, 0):
        sys.exit(
            f"kernelgate.tune.attention: needs an sm_90 GPU (TMA reductions), got sm_{capability[0]}{capability[1]}"
        )
    os.environ.setdefault("TILELANG_CACHE_DIR", tempfile.mkdtemp(prefix="tilelang-tune-"))

    from kernelgate.kernels.attention.ops import cuda_arch

    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}")
    compile_all(args.configs, cuda_arch(capability), args.jobs)
    for name in args.configs:
        sweep(name)


if __name__ == "__main__":
    main()
