"""What each LayerNorm launch option buys over the broad set: ``python -m kernelgate.tune.options``.

For every case of the broad set (the row widths models use, ``MODEL_WIDTHS`` at ``MODEL_ROWS`` rows, in
fp32, bf16 and fp16; the forward as inference, the backward alone), what ``auto`` launches (or
``--variant``) is timed beside the same launch with one option switched off, each option it uses in
turn, interleaved round by round in one process as the tuner confirms its leaders. The row slices'
alternative is two_pass's backward, since a row of more than 8192 lanes fits no single program.

It prints each case's ratios, time with the option off over time with it on (above 1: the option pays),
and per option their range and geometric mean over the cases that use it: the table of
docs/kernels/layer-norm.md#launch-options. An option that does not pay there does not earn its
constexpr, launcher branch and tuner phase.

``--plan`` lists the cases and the options each one uses, without a GPU.
"""

import argparse
import dataclasses
import math
import statistics
from collections.abc import Callable

import torch

from kernelgate import cli
from kernelgate.cases.common import DTYPES
from kernelgate.cases.layer_norm import (
    BENCH_DTYPES,
    LAYER_NORM_VARIANTS,
    MODEL_ROWS,
    MODEL_WIDTHS,
    LayerNormCase,
)
from kernelgate.kernels.layer_norm.config import LaunchConfig, fused_tail_n, launch_config, next_power_of_2
from kernelgate.measure import timing
from kernelgate.measure.parallel import default_jobs


@dataclasses.dataclass(frozen=True)
class Setting:
    """One way to run a case: the kernel, its configuration, and whether it launches with PDL."""

    variant: str
    cfg: LaunchConfig
    pdl: bool = True


@dataclasses.dataclass(frozen=True)
class Option:
    name: str
    used: Callable[[Setting, str, torch.dtype, int], bool]  # (the setting as launched, direction, dtype, N)
    off: Callable[[Setting, str, torch.dtype, int, str], Setting]  # the same setting without it, on this GPU


def _field(field: str, off) -> tuple[Callable, Callable]:
    """An option that is a LaunchConfig field: used where the field is not ``off``, switched off by setting it so."""
    used = lambda s, *_: getattr(s.cfg, field) != off
    without = lambda s, *_: dataclasses.replace(s, cfg=dataclasses.replace(s.cfg, **{field: off}))
    return used, without


def _split_tile(s: Setting, direction: str, dtype: torch.dtype, n: int) -> bool:
    return s.variant == "fused" and s.cfg.row_slices == 1 and fused_tail_n(n, s.cfg.block_n) > 0


def _whole_tile(s: Setting, direction: str, dtype: torch.dtype, n: int, gpu: str) -> Setting:
    return dataclasses.replace(s, cfg=dataclasses.replace(s.cfg, block_n=next_power_of_2(n)))


def _fused_forward_with_pdl(s: Setting, direction: str, dtype: torch.dtype, n: int) -> bool:
    return s.variant == "fused" and direction == "fwd" and s.pdl


def _sliced(s: Setting, direction: str, dtype: torch.dtype, n: int) -> bool:
    return s.cfg.row_slices > 1


def _two_pass_backward(s: Setting, direction: str, dtype: torch.dtype, n: int, gpu: str) -> Setting:
    return Setting("two_pass", launch_config("two_pass", direction, dtype, n, gpu))


LAUNCHED = "as launched"
OPTIONS = [
    Option("L2 prefetch", *_field("prefetch_per_sm", 0)),
    Option("preload w, b", *_field("preload_affine", False)),
    Option("one reduction", *_field("single_reduction", False)),
    Option("head + tail tile", _split_tile, _whole_tile),
    Option("PDL", _fused_forward_with_pdl, lambda s, *_: dataclasses.replace(s, pdl=False)),
    Option("pipelined loads", *_field("num_stages", 1)),
    Option("balanced grid", *_field("balanced_grid", False)),
    Option("column grads", *_field("column_grads", False)),
    Option("row slices", _sliced, _two_pass_backward),
]


def broad_set(dtypes=BENCH_DTYPES, widths=MODEL_WIDTHS, rows: int = MODEL_ROWS) -> list[LayerNormCase]:
    return [LayerNormCase(rows, n, dtype) for dtype in dtypes for n in widths]


def settings(case: LayerNormCase, variant: str, direction: str, gpu: str | None, pdl: bool) -> dict[str, Setting]:
    """{"as launched": what ``variant`` launches for this key on this GPU class (its tuned configuration, else
    the heuristic's), option name: that setting with the option off} for each option the launch uses."""
    from kernelgate.kernels.layer_norm.ops import select_variant

    dtype = DTYPES[case.dtype]
    variant = select_variant(variant, direction, dtype, case.n, gpu)
    launched = Setting(variant, launch_config(variant, direction, dtype, case.n, gpu), pdl)
    used = [o for o in OPTIONS if o.used(launched, direction, dtype, case.n)]
    return {LAUNCHED: launched, **{o.name: o.off(launched, direction, dtype, case.n, gpu) for o in used}}


# --- GPU side ---------------------------------------------------------------------------------------------


def _runner(tensors, direction: str, setting: Setting):
    """``tensors``' runner (the tuner's: a CUDA graph of back-to-back calls on rotated inputs) for one setting.
    Only the fused forward takes PDL (the backward's column sum keeps it: not an option of its own)."""
    if setting.pdl or direction != "fwd":
        return tensors.runner(setting.variant, direction, setting.cfg)
    from kernelgate.kernels.layer_norm import ops

    def launch_without_pdl(s: dict):
        y = torch.empty_like(s["x"])
        launch = ops.forward_launch(s["x"], s["w"], s["b"], tensors.case.eps, setting.variant, y, None, None,
                                    setting.cfg)  # fmt: skip
        return dataclasses.replace(launch, constexprs={**launch.constexprs, "PDL": False}, pdl=False)()

    return tensors.runner_of(launch_without_pdl)


def compile_settings(todo: list[tuple[LayerNormCase, str, dict[str, Setting]]], jobs: int) -> dict:
    """{(case, direction, option): why it cannot run} after compiling every setting in parallel."""
    from kernelgate.tune.compile import CompileTask, compile_all
    from kernelgate.tune.space import compile_unit

    def task(case, direction, s: Setting) -> CompileTask:
        return CompileTask(s.variant, direction, case.dtype, case.n, compile_unit(s.cfg))

    tasks = {task(c, d, s) for c, d, per_option in todo for s in per_option.values()}
    print(f"compiling {len(tasks)} kernels on {jobs} processes", flush=True)
    dropped = {t: r for t, r in compile_all(sorted(tasks, key=str), jobs).items() if r is not None}
    return {
        (c, d, name): dropped[task(c, d, s)]
        for c, d, per_option in todo
        for name, s in per_option.items()
        if task(c, d, s) in dropped
    }


def measure(case: LayerNormCase, direction: str, per_option: dict[str, Setting], rounds: int) -> dict[str, float]:
    """{option: median over interleaved rounds of time without it / time as launched}."""
    from kernelgate.measure.workloads import warmed
    from kernelgate.tune.layer_norm import CaseTensors

    tensors = CaseTensors.make(case, "two_pass", direction)
    fns = {name: warmed(_runner(tensors, direction, s)) for name, s in per_option.items()}
    t = timing.interleaved_ms(fns, rounds)
    return {name: timing.median_ratio(t[name], t[LAUNCHED]) for name in per_option if name != LAUNCHED}


def summary(ratios: dict[str, list[float]]) -> list[str]:
    lines = ["| option | cases that use it | time without it / with it | geometric mean |", "|---|---|---|---|"]
    for option in OPTIONS:
        measured = ratios.get(option.name, [])
        if not measured:
            lines.append(f"| {option.name} | 0 | | |")
            continue
        geomean = math.exp(statistics.fmean(math.log(r) for r in measured))
        lines.append(f"| {option.name} | {len(measured)} | {min(measured):.3f}-{max(measured):.3f}x | {geomean:.3f}x |")
    return lines


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--variant", default="auto", choices=LAYER_NORM_VARIANTS)
    parser.add_argument("--directions", nargs="+", default=["fwd", "bwd"], choices=["fwd", "bwd"])
    parser.add_argument("--dtypes", nargs="+", default=BENCH_DTYPES, choices=BENCH_DTYPES)
    parser.add_argument("--widths", nargs="+", type=cli.positive_int, default=MODEL_WIDTHS)
    parser.add_argument("--rows", type=cli.positive_int, default=MODEL_ROWS)
    parser.add_argument("--rounds", type=cli.positive_int, default=timing.ROUNDS)
    parser.add_argument("--jobs", type=cli.positive_int, default=default_jobs(14), help="compile processes")
    parser.add_argument("--gpu", help="GPU class whose tuned table --plan reads (default: the visible GPU's)")
    parser.add_argument("--plan", action="store_true", help="list each case's options, then stop")
    args = parser.parse_args(argv)

    from kernelgate.kernels.device import gpu_class, is_sm90_or_newer

    gpu = args.gpu or (gpu_class(torch.cuda.get_device_name(0)) if torch.cuda.is_available() else None)
    pdl = not torch.cuda.is_available() or is_sm90_or_newer(0)
    cases = broad_set(args.dtypes, args.widths, args.rows)
    todo = [(c, d, settings(c, args.variant, d, gpu, pdl)) for d in args.directions for c in cases]
    print(f"options: {len(todo)} cases, {sum(len(s) - 1 for _, _, s in todo)} options off, GPU class {gpu}")
    if args.plan:
        for case, direction, per_option in todo:
            print(f"  {case.name} {direction}: {per_option[LAUNCHED].variant} {per_option[LAUNCHED].cfg}; off: "
                  f"{', '.join(list(per_option)[1:]) or '-'}")  # fmt: skip
        return
    if not torch.cuda.is_available():
        raise SystemExit("kernelgate.tune.options times kernels on a GPU; none is visible (--plan lists the cases)")
    failed = compile_settings(todo, args.jobs)
    ratios: dict[str, list[float]] = {}
    print(f"| case | {args.variant} runs | option off: time / time as launched |\n|---|---|---|")
    for case, direction, per_option in todo:
        runnable = {name: s for name, s in per_option.items() if (case, direction, name) not in failed}
        measured = measure(case, direction, runnable, args.rounds) if LAUNCHED in runnable else {}
        for name, r in measured.items():
            ratios.setdefault(name, []).append(r)
        cells = [
            f"{name} {measured[name]:.3f}x"
            if name in measured
            else f"{name} n/a ({failed.get((case, direction, name)) or failed[case, direction, LAUNCHED]})"
            for name in list(per_option)[1:]
        ]
        print(f"| {case.name} {direction} | {per_option[LAUNCHED].variant} | {'; '.join(cells) or '-'} |", flush=True)
        torch.cuda.empty_cache()
    print("\n" + "\n".join(summary(ratios)))


if __name__ == "__main__":
    main()
