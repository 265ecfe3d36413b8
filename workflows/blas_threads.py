"""Command-line entry points set numpy's BLAS to one thread before numpy is first imported.

Tusk never leans on BLAS for speed (the interpreter's matmuls are at most 128 x 512), but OpenBLAS
starts one thread per core when numpy is imported, and on a 2-core machine that start-up is ~60 ms
of CPU: a sixth of a 1e5-instruction ``full_unroll``.  Dask's nanny gives its workers the same
setting.  A value the user set wins; a library import of ``tusk`` changes nothing.
"""

from __future__ import annotations

import os
import sys

VARIABLES = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def one_blas_thread() -> None:
    if "numpy" in sys.modules:  # too late to matter, and not ours to change in a running program
        return
    for name in VARIABLES:
        os.environ.setdefault(name, "1")
