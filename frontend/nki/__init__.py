"""``nki`` / ``neuronxcc.nki`` as Tusk's front end provides it while a kernel file is traced.

``@nki.jit`` (and ``@nki.baremetal``, ``@nki.benchmark``, ``@nki.profile``,
``@nki.trace`` as decorators) mark kernel functions; ``kernel[grid]`` gives
the SPMD launch form.  Outside a trace, a kernel called on numpy arrays (as
NKI's simulation mode runs it; also ``nki.simulate``) is traced for their
shapes and run in Tusk's interpreter; on anything else there is no device
here.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from tusk.frontend.nki import compiler, language, typing  # noqa: F401 - ``nki.compiler`` ... attribute access
from tusk.frontend.nki import isa_v2 as isa  # noqa: F401 - ``nki.isa``: NKI 2.x (neuronxcc.nki: see imports.py)

dtype = language.Dtype  # ``def f(dt: nki.dtype)``: the annotation NKI 2.x library code evaluates at import


class Kernel:
    """A kernel function marked with ``@nki.jit``."""

    def __init__(self, fn: Callable[..., Any], options: dict[str, Any] | None = None):
        self.fn = fn
        self.options = dict(options or {})
        self.grid: tuple[int, ...] = ()
        functools.update_wrapper(self, fn)

    def __getitem__(self, grid: Any) -> Kernel:
        """``kernel[2, 2](...)``: the same kernel launched on an SPMD grid."""
        g = grid if isinstance(grid, tuple) else (grid,)
        k = Kernel(self.fn, self.options)
        k.grid = tuple(int(x) for x in g)
        return k

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        from tusk.frontend.tracer import _CURRENT
        if _CURRENT:  # a launcher or another kernel calls it: traced inline, once per program of its grid
            from tusk.frontend.trace import launch
            return launch(_CURRENT[-1], self.fn, args, kwargs, self.grid)
        import numpy as np

        from tusk.frontend.top_level import stop_at_script_call
        stop_at_script_call((*args, *kwargs.values()))  # `tusk trace` running a script's own check
        if all(isinstance(a, np.ndarray) or not _tensor_like(a) for a in (*args, *kwargs.values())):
            # on numpy arrays, as NKI's simulation and baremetal modes run a kernel: in Tusk's interpreter
            return simulate_kernel(self, *args, **kwargs)
        from tusk.frontend.errors import TraceError
        raise TraceError(f"kernel {self.fn.__name__} cannot run here: trace it with "
                         f"`tusk trace FILE.py::{self.fn.__name__} --input ...` and compile the KLR")


def jit(fn: Callable[..., Any] | None = None, **options: Any) -> Any:
    """``@nki.jit`` or ``@nki.jit(mode=...)``."""
    if fn is None:
        return lambda f: Kernel(f, options)
    return Kernel(fn, options)


baremetal = benchmark = profile = trace = jit  # `nki.trace`: the decorator's earlier name
tensor = typing.tensor  # `def k(x: nki.tensor)`


def _tensor_like(x: Any) -> bool:
    """An argument a device run would take as a tensor (a framework's array), not a number or a shape."""
    return hasattr(x, "shape") and hasattr(x, "dtype")


def simulate_kernel(kernel: Any, *args: Any, **kwargs: Any) -> Any:
    """``nki.simulate_kernel(kernel, a, b)`` on numpy arrays (a kernel file's own check at its top level): the
    kernel traced for the arrays' shapes and dtypes and run in Tusk's interpreter; its output array(s)."""
    import inspect

    import numpy as np

    from tusk.frontend.errors import TraceError
    from tusk.frontend.tracer import _CURRENT

    if _CURRENT:
        raise TraceError("nki.simulate / nki.simulate_kernel inside a kernel being traced")
    fn = kernel.fn if isinstance(kernel, Kernel) else kernel
    bound = inspect.signature(fn).bind(*args, **kwargs)
    arrays = {k: v for k, v in bound.arguments.items() if isinstance(v, np.ndarray)}
    others = {k: v for k, v in bound.arguments.items() if k not in arrays}
    from tusk.frontend.check import run_klr
    from tusk.frontend.specs import TensorSpec
    from tusk.frontend.tensors import as_dtype
    from tusk.frontend.trace import trace_function

    specs = [TensorSpec(as_dtype(a.dtype), tuple(a.shape)) for a in arrays.values()]
    data = trace_function(kernel, specs, args=others)
    outs = list(run_klr(data, arrays).values())
    return outs[0] if len(outs) == 1 else tuple(outs)


def simulate(kernel: Any) -> Callable[..., Any]:
    """``nki.simulate(kernel)(a, b)``: :func:`simulate_kernel`."""
    return functools.partial(simulate_kernel, kernel)
