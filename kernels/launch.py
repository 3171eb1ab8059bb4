"""Kernel launches, and the compiled kernels they bind to, for a Triton kernel's eager calls.

A ``Launch`` is one kernel launch, fully specified: a kernel's ops build it, a tuner times it and
``kernelgate.explain.compiled`` compiles it ahead of time on meta tensors. Launched by ``kernel[grid](...)``,
Triton binds and specializes its arguments, hashes a cache key and looks the compiled kernel up on
every call: tens of microseconds of host time a call on an H200's host, more than eager torch's whole
call for a short kernel.

``bind`` does that once per launch key, and ``bound(key)`` afterwards calls the compiled kernel's
C launch function directly. The key must therefore determine everything the launch depends on but
its tensors and float arguments: the configuration and, for Triton's specialization, every integer
argument's value and each pointer's alignment (the integers themselves and each pointer's low four
bits, say). The bound kernels are kept in an ``LRU``: a training loop whose row counts vary binds a
kernel per count, and only the recent ones are worth keeping.
"""

import collections
import dataclasses
from collections.abc import Hashable

import triton
from triton import knobs
from triton.runtime import driver


@dataclasses.dataclass(frozen=True)
class Launch:
    """One kernel launch: run it, or compile it ahead of time (``kernelgate.explain.compiled`` builds it on meta
    tensors to inspect the machine code)."""

    kernel: triton.JITFunction
    grid: tuple[int, ...]
    args: tuple
    constexprs: dict
    num_warps: int
    pdl: bool = False  # programmatic dependent launch: the kernel may start before its predecessor ends
    cooperative: bool = False  # its programs wait for each other, so all must be resident (or it fails)

    def __call__(self):
        """Launch; returns Triton's compiled kernel (``n_regs``, ``n_spills``), None in the interpreter."""
        return self.kernel[self.grid](*self.args, **self.constexprs, num_warps=self.num_warps, launch_pdl=self.pdl,
                                      launch_cooperative_grid=self.cooperative)  # fmt: skip

    @property
    def arguments(self) -> dict:
        """The runtime arguments by the kernel's parameter names."""
        names = [name for name in self.kernel.arg_names if name not in self.constexprs]
        return dict(zip(names, self.args, strict=True))


class Bound:
    """A compiled kernel with the launch it was compiled for, launched again on new leading arguments."""

    def __init__(self, launch: Launch, compiled, leading: int):
        names = launch.kernel.arg_names
        if any(name in launch.constexprs for name in names[: len(launch.args)]):
            raise TypeError(f"{launch.kernel.__name__}: constexpr parameters must follow the runtime ones")
        self.compiled = compiled
        self.grid = (*launch.grid, 1, 1)[:3]
        self.constexprs = launch.constexprs  # what it was compiled with
        # The launcher takes every parameter in order; it skips the constexprs' values.
        self.trailing = (*launch.args[leading:], *(launch.constexprs[name] for name in names[len(launch.args) :]))
        self.device = launch.args[0].get_device()
        self.current_stream = driver.active.get_current_stream
        compiled[self.grid]  # loads the module on the device (Triton's own first launch did too)
        # Triton's launcher object allocates the scratch buffers a kernel asks for, then calls its C launch
        # function. A kernel that asks for none calls that function itself: a few us of host time a launch.
        launcher = compiled.run
        self.c_launch = None if launcher.global_scratch_size or launcher.profile_scratch_size else launcher.launch
        # The C function's arguments after the grid and the stream: the kernel, whether the launch is
        # cooperative and programmatic, no scratch, the kernel's metadata, and no launch metadata or hooks.
        self.launch_options = (compiled.function, launcher.launch_cooperative_grid, launcher.launch_pdl, None, None,
                               compiled.packed_metadata, None, None, None)  # fmt: skip

    def __call__(self, leading: tuple) -> None:
        """Launch on ``leading`` arguments with each tensor given by its address (``data_ptr()``). Given a
        tensor, the launcher would call its data_ptr and then ask the driver whether the device can read
        it; the ops checked every tensor's device already, and their launch keys read the addresses."""
        stream = self.current_stream(self.device)
        if self.c_launch is None or knobs.runtime.launch_enter_hook.calls or knobs.runtime.launch_exit_hook.calls:
            self.compiled[self.grid](*leading, *self.trailing, stream=stream)  # scratch, or a profiler listens
            return
        self.c_launch(*self.grid, stream, *self.launch_options, *leading, *self.trailing)


class LRU(collections.OrderedDict):
    """A dict of at most ``size`` entries: ``get`` makes the entry it finds the most recent, and storing one
    past ``size`` drops the least recent."""

    def __init__(self, size: int):
        super().__init__()
        self.size = size

    def get(self, key, default=None):
        try:
            self.move_to_end(key)
        except KeyError:
            return default
        return self[key]

    def __setitem__(self, key, value) -> None:
        super().__setitem__(key, value)
        self.move_to_end(key)
        if len(self) > self.size:
            self.popitem(last=False)


# A forward, a backward and a column kernel per layout of an op's call: room for about a thousand layouts.
_BOUND: LRU = LRU(4096)


def bound(key: Hashable) -> Bound | None:
    """The kernel bound to ``key``, if one is. Every launch ``key`` stands for must equal the bound one
    but in its leading arguments, and those may differ only where Triton does not specialize: tensors
    of the same dtype and alignment, floats."""
    return _BOUND.get(key)


def bind(key: Hashable, launch: Launch, leading: int) -> None:
    """Launch ``launch`` through Triton, and bind its compiled kernel to ``key``: later launches pass
    only the first ``leading`` runtime arguments, tensors as addresses."""
    compiled = launch()
    if compiled is not None:  # None: Triton's interpreter, which has no launcher to bind
        _BOUND[key] = Bound(launch, compiled, leading)
