"""One parameter combination of one asv benchmark: what the benchmark workers measure, the gate judges and
the rules of ``perf-thresholds.toml`` and the groups of ``pr-check.toml`` name."""

import ast
import dataclasses
import itertools


@dataclasses.dataclass(frozen=True)
class Case:
    """Equal where the benchmark and the parameters are; ordered as asv numbers a benchmark's combinations."""

    benchmark: str  # asv's name: module.Class.method
    params: tuple[tuple[str, str], ...] = ()  # (name, asv's repr of the value), in declared order
    # Its position in the product of the benchmark's params, and the seconds a request for it may take (asv's
    # ``timeout``) and its setup_cache's, as asv's discovery gives them (``suite_cases``).
    index: int = dataclasses.field(default=0, compare=False)
    timeout: float = dataclasses.field(default=60.0, compare=False)
    setup_cache_timeout: float = dataclasses.field(default=0.0, compare=False)

    def __lt__(self, other: "Case") -> bool:
        return (self.benchmark, self.index) < (other.benchmark, other.index)

    @property
    def raw(self) -> tuple[str, ...]:
        """asv's repr of each value."""
        return tuple(raw for _, raw in self.params)

    @property
    def values(self) -> list:
        return [ast.literal_eval(raw) for raw in self.raw]

    def value(self, name: str) -> str | None:
        """The parameter's value as written in the benchmark (``'fwd'`` -> ``fwd``)."""
        return next((_unquote(raw) for key, raw in self.params if key == name), None)

    @property
    def label(self) -> str:
        return ", ".join(_unquote(raw) for raw in self.raw) or "-"

    @property
    def asv_id(self) -> str:
        """The name asv's ``--bench`` regex is matched against."""
        return f"{self.benchmark}({', '.join(self.raw)})" if self.params else self.benchmark

    @property
    def kind(self) -> str:
        """ "time" for a sampled time (lower is better), "track" for a tracked value."""
        return "time" if self.benchmark.rsplit(".", 1)[-1].startswith("time_") else "track"

    @property
    def unit(self) -> tuple[str, ...]:
        """What one shard takes whole: the cases that share all but the last parameter, the implementation or
        variant. A metrics class measures a case's variants at once, and the gate's ordering rules compare a
        time case with its other implementations."""
        owner = self.benchmark if self.kind == "time" else self.benchmark.rsplit(".", 1)[0]
        return (self.kind, owner, *self.raw[:-1])

    def replaced(self, changes: dict[str, str]) -> "Case":
        return Case(self.benchmark, tuple((k, repr(changes[k]) if k in changes else raw) for k, raw in self.params))


def _unquote(raw: str) -> str:
    try:
        return str(ast.literal_eval(raw))
    except (ValueError, SyntaxError):
        return raw


def suite_cases(suite: dict[str, dict]) -> list[Case]:
    """Every case of a suite (asv's discovery output, or a benchmarks.json, by benchmark name)."""
    cases = []
    for name, meta in sorted(suite.items()):
        names, grid = meta["param_names"], meta["params"]
        limits = {"timeout": meta.get("timeout", 60.0), "setup_cache_timeout": meta.get("setup_cache_timeout", 0.0)}
        combos = itertools.product(*grid) if grid else [()]
        cases += [Case(name, tuple(zip(names, combo, strict=True)), i, **limits) for i, combo in enumerate(combos)]
    return cases
