"""Tusk's processes keep freed memory instead of giving it back at once (``full_unroll``, ``tusk compile`` and
its local workers).

glibc hands every block above its mmap threshold (128 KiB, adapting up to 32 MiB) to its own ``mmap``
and unmaps it on ``free``, and trims the top of the heap when more than twice that is free.  numpy's
large temporaries are allocated and freed again and again, so each one is page-faulted afresh; on this
VM the first touch of fresh memory costs about 1 ms per MB of system time.  Raising the thresholds
before the first large allocation lets freed blocks be reused.  A value the user set (``MALLOC_*_``
in the environment, read by glibc at start-up) wins; off glibc the malloc settings do nothing.

numpy asks for transparent huge pages on every array of 4 MiB or more (``madvise(MADV_HUGEPAGE)``).
Where the kernel's THP ``defrag`` setting is ``always``, ``madvise`` or ``defer+madvise``, the first touch of
such memory may compact physical memory there and then to find a huge page.  On this VM a fresh 200 MB
``np.ones`` took 0.013 s or 0.36-0.55 s that way, from one array to the next, against a steady 0.07 s in
4 KiB pages (six 200 MB arrays in a fresh process, 3 runs each way, one and two processes at once), and
whole in-process builds of large_matmul spent 2.2 s of system time against 0.9 s (5 interleaved pairs).  Tusk's
processes then turn numpy's request off (``NUMPY_MADVISE_HUGEPAGE=0``; the user's own value wins).
"""

from __future__ import annotations

import os
import sys

M_TRIM_THRESHOLD, M_TOP_PAD, M_MMAP_THRESHOLD, M_ARENA_MAX = -1, -2, -3, -8
SETTINGS = ((M_MMAP_THRESHOLD, "MALLOC_MMAP_THRESHOLD_", 256 << 20),
            (M_TRIM_THRESHOLD, "MALLOC_TRIM_THRESHOLD_", 1 << 30),
            (M_TOP_PAD, "MALLOC_TOP_PAD_", 64 << 20),
            # one arena: a Dask worker runs its tasks in a thread, and a thread's own arena is made of 64 MiB
            # heaps, so every larger numpy temporary was mmapped and page-faulted afresh there (80 MB arrays in
            # a loop: 56k faults and 1.3 s of system time in a thread, none with one arena, 3.3 -> 2.2 s CPU)
            (M_ARENA_MAX, "MALLOC_ARENA_MAX", 1))


THP_DEFRAG = "/sys/kernel/mm/transparent_hugepage/defrag"
NUMPY_HUGEPAGE = "NUMPY_MADVISE_HUGEPAGE"


def huge_pages_stall(path: str | None = None) -> bool:
    """Whether a page fault in memory marked for huge pages may compact memory before it returns."""
    try:
        with open(path or THP_DEFRAG) as fh:
            text = fh.read()
    except OSError:
        return False
    chosen = text[text.find("[") + 1:text.find("]")] if "[" in text else ""
    return chosen in ("always", "madvise", "defer+madvise")


def no_stalling_huge_pages() -> None:
    """Turn numpy's huge-page request off in this process (and the processes it starts) where it stalls."""
    if NUMPY_HUGEPAGE in os.environ or not huge_pages_stall():
        return
    os.environ[NUMPY_HUGEPAGE] = "0"  # numpy reads it when imported (here, or in a spawned worker)
    if "numpy" in sys.modules:
        import importlib

        import numpy

        # numpy 2 moved it to numpy._core (numpy.core warns); numpy 1.26's numpy._core is a stub
        where = "numpy._core.multiarray" if int(numpy.__version__.split(".")[0]) >= 2 else "numpy.core.multiarray"
        getattr(importlib.import_module(where), "_set_madvise_hugepage", lambda on: on)(False)


def keep_freed_memory() -> None:
    if not sys.platform.startswith("linux"):
        return
    no_stalling_huge_pages()
    import ctypes

    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):  # not glibc
        return
    for param, variable, value in SETTINGS:
        if variable not in os.environ:
            mallopt(param, value)


def environment() -> dict[str, str]:
    """The same settings as environment variables, for processes about to start (glibc reads them at start-up):
    those the user has not set."""
    if not sys.platform.startswith("linux"):
        return {}
    return {**{variable: str(value) for _, variable, value in SETTINGS if variable not in os.environ},
            **({NUMPY_HUGEPAGE: os.environ[NUMPY_HUGEPAGE]} if NUMPY_HUGEPAGE in os.environ else {})}
