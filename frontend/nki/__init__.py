"""``nki`` / ``neuronxcc.nki`` as Tusk's front end provides it while a kernel file is traced.

``@nki.jit`` (and ``@nki.baremetal``, ``@nki.benchmark``, ``@nki.profile``
as decorators) mark kernel functions; ``kernel[grid]`` gives the SPMD launch
form.  Calling a kernel directly works only under ``tusk trace`` / ``tusk
compile``: there is no device here.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from tusk.frontend.nki import isa, language, typing  # noqa: F401 - ``nki.language`` ... attribute access


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
        from tusk.frontend.errors import TraceError
        raise TraceError(f"kernel {self.fn.__name__} cannot run here: trace it with "
                         f"`tusk trace FILE.py::{self.fn.__name__} --input ...` and compile the KLR")


def jit(fn: Callable[..., Any] | None = None, **options: Any) -> Any:
    """``@nki.jit`` or ``@nki.jit(mode=...)``."""
    if fn is None:
        return lambda f: Kernel(f, options)
    return Kernel(fn, options)


baremetal = benchmark = profile = jit
