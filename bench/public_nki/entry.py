"""One public kernel entry point, as the bench runs it."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

# reference(inputs, args) -> the kernel's outputs in the order of its KLR outputs; a reference with a third
# parameter also gets the outputs the kernel produced (for kernels that draw random numbers on the device)
Reference = Callable[[list[np.ndarray], dict], Sequence[np.ndarray]]


@dataclass(frozen=True)
class Entry:
    name: str                      # unique across the bench
    group: str                     # tutorials, reference, contributed, docs1, docs2, library, klr
    path: str                      # inside the repos directory, e.g. aws-neuron+nki-samples/src/...
    function: str | None           # None: the file's only @nki.jit function
    inputs: tuple[str, ...]        # tusk trace --input specs, in argument order
    reference: Reference | None = None
    args: tuple[str, ...] = ()     # tusk trace --arg NAME=VALUE
    grid: str | None = None        # tusk trace --grid
    ranges: tuple[tuple[float, float], ...] = ()   # per input (lo, hi); default (-1, 1)
    ints: tuple[int, ...] = ()     # indices of inputs that hold integer values drawn in their range
    rtol: float = 1e-4
    atol: float = 1e-4
    partial: bool = False          # the kernel writes only part of its output by design
    note: str = ""                 # why it is expected to be refused, or what is special
    options: dict = field(default_factory=dict)

    def range_of(self, i: int) -> tuple[float, float]:
        return self.ranges[i] if i < len(self.ranges) else (-1.0, 1.0)
