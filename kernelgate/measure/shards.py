"""Cases split into shards of similar cost, whole units kept together: the PR check's runners and the main
job's GPUs each measure one.

A case's cost is its kernel's estimate (``Suite.seconds``) where its suite gives one, else an average: 0.55 s
a time case and 2.9 s a metrics unit (H100 averages).
"""

from kernelgate.asv_case import Case

TIME_CASE_S, METRICS_UNIT_S = 0.55, 2.9


def seconds(case: Case) -> float:
    """Rough seconds to measure a time case, or a metrics unit from any of its cases, on both commits."""
    from kernelgate.cases import suite_of  # here: the merge of the shards reads results without the kernels' stack

    suite = suite_of(case.benchmark)
    estimate = suite.seconds(case) if suite is not None else None
    if estimate is not None:
        return estimate
    return TIME_CASE_S if case.kind == "time" else METRICS_UNIT_S


def _cost(unit: list[Case]) -> float:
    return sum(seconds(c) for c in unit) if unit[0].kind == "time" else seconds(unit[0])


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
