"""Cases split into shards of similar cost, whole units kept together: the PR check's runners and the main
job's GPUs each measure one."""

from kernelgate.asv_case import Case

# Rough seconds to measure, to balance shards (both commits). Measuring waits on the device, so a
# LayerNorm case's seconds grow with the bytes a call moves (LayerNormCase.bytes_moved): a time case
# 0.21 s + 0.59 s a GB, a metrics unit (its case beside references and copies) 2.3 s + 1.0 s a GB,
# fitted on an H200 to the seconds the check printed for 247 cases and 121 units (residuals 0.45 s a
# unit). An attention backward takes about 3 s plus 0.18 s per TFLOP of work in one of its samples
# (timing.sample_calls): 60 s a mode at 8k + 16k tokens in samples of 50 calls. Others: 0.55 s a time
# case, 2.9 s a metrics unit (H100 averages).
TIME_CASE_S, METRICS_UNIT_S = 0.55, 2.9
ATTENTION_CASE_S, ATTENTION_S_PER_SAMPLE_TFLOP = 3.0, 0.18
LAYER_NORM_TIME_CASE_S = (0.21, 0.59)  # seconds, and seconds a GB
LAYER_NORM_METRICS_UNIT_S = (2.3, 1.0)


def _layer_norm_gigabytes(case: Case) -> float | None:
    """GB a call of a LayerNorm case (shape, dtype, direction, implementation) moves; None for others."""
    if not case.benchmark.startswith("bench_layer_norm.") or len(case.params) != 4:
        return None
    from kernelgate.cases.layer_norm import bench_case

    shape, dtype, direction, _ = case.values
    return bench_case(shape, dtype).bytes_moved(direction) / 1e9


def _time_case_seconds(case: Case) -> float:
    if case.benchmark.startswith("bench_attention.") and case.params:
        from kernelgate.cases.attention import BENCH_CONFIGS
        from kernelgate.measure import timing

        config = BENCH_CONFIGS.get(case.values[0])
        if config is not None:
            tflop = config.flops_backward() / 1e12
            return ATTENTION_CASE_S + ATTENTION_S_PER_SAMPLE_TFLOP * tflop * timing.sample_calls(tflop)
    gigabytes = _layer_norm_gigabytes(case)
    return TIME_CASE_S if gigabytes is None else LAYER_NORM_TIME_CASE_S[0] + LAYER_NORM_TIME_CASE_S[1] * gigabytes


def _metrics_unit_seconds(case: Case) -> float:
    """One metrics unit's seconds, from any of its cases (they share the case's parameters)."""
    gigabytes = _layer_norm_gigabytes(case)
    return (
        METRICS_UNIT_S if gigabytes is None else LAYER_NORM_METRICS_UNIT_S[0] + LAYER_NORM_METRICS_UNIT_S[1] * gigabytes
    )


def _cost(unit: list[Case]) -> float:
    return sum(_time_case_seconds(c) for c in unit) if unit[0].kind == "time" else _metrics_unit_seconds(unit[0])


def shard(cases: list[Case], count: int) -> list[list[Case]]:
    """``cases`` split into ``count`` disjoint shards of similar cost, whole units kept together;
    the same for every shard that computes it (deterministic)."""
    units: dict[tuple, list[Case]] = {}
    for case in sorted(cases):
        units.setdefault(case.unit, []).append(case)
    loads = [0.0] * count
    shards: list[list[Case]] = [[] for _ in range(count)]
    for unit in sorted(units, key=lambda u: (-_cost(units[u]), u)):
        target = min(range(count), key=lambda k: (loads[k], k))
        loads[target] += _cost(units[unit])
        shards[target] += units[unit]
    return [sorted(s) for s in shards]
