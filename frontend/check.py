"""Run a traced kernel in Tusk's interpreter: translate its KLR as the build does, feed inputs, read outputs.

Used by the tests and ``bench/bench_trace.py`` to compare a kernel with its numpy reference.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping

import numpy as np

from tusk.ir import klr


def run_klr(data: bytes, inputs: Mapping[str, np.ndarray], *, strict: bool = True) -> dict[str, np.ndarray]:
    """Outputs by tensor name of the KLR kernel ``data`` run on ``inputs`` (by argument name)."""
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
    return run(out, dict(inputs), strict=strict)
