"""Run a traced kernel in Tusk's interpreter: translate its KLR as the build does, feed inputs, read outputs.

Used by the tests and ``bench/bench_trace.py`` to compare a kernel with its numpy reference.  By default the
kernel runs twice, its memories starting as different random bytes: an output element that differs between
the runs was never written (a kernel that writes its outputs only in part), and is refused, naming the output
and how many of its elements.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping

import numpy as np

from tusk.ir import klr
from tusk.ir.errors import InputError


class UnwrittenOutput(InputError):
    """The kernel left elements of an output unwritten."""


def run_klr(data: bytes, inputs: Mapping[str, np.ndarray], *, strict: bool = True,
            check_written: bool = True) -> dict[str, np.ndarray]:
    """Outputs by tensor name of the KLR kernel ``data`` run on ``inputs`` (by argument name); with
    ``check_written``, an UnwrittenOutput when an output element is never written."""
    from tusk.sim.interp import run
    from tusk.stages.host import host_module_for
    from tusk.stages.translate_nki_ast_to_bir import TranslateNKIASTToBIR

    kernel = klr.read_klr(data).contents.kernel
    with tempfile.TemporaryDirectory(prefix="tusk-check-") as tmp:
        path = os.path.join(tmp, f"{kernel.name}.klr")
        with open(path, "wb") as f:
            f.write(data)
        module = host_module_for(path, None, os.path.join(tmp, "art"))
        out, _ = TranslateNKIASTToBIR().run(module)
    if not check_written:
        return run(out, dict(inputs), strict=strict)
    first = run(out, dict(inputs), strict=strict, seed=1)
    second = run(out, dict(inputs), strict=strict, seed=2)
    for name, a in first.items():
        same = np.ascontiguousarray(a).view(np.uint8) == np.ascontiguousarray(second[name]).view(np.uint8)
        lost = int(a.size - same.reshape(a.size, -1).all(axis=1).sum()) if a.size else 0
        if lost:
            raise UnwrittenOutput(f"kernel {kernel.name}: {lost:,} of the {a.size:,} elements of output {name} "
                                  "are never written")
    return first
