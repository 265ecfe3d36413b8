"""Tusk's processes keep freed memory instead of giving it back at once (``full_unroll``, ``tusk compile`` and
its local workers).

glibc hands every block above its mmap threshold (128 KiB, adapting up to 32 MiB) to its own ``mmap``
and unmaps it on ``free``, and trims the top of the heap when more than twice that is free.  numpy's
large temporaries are allocated and freed again and again, so each one is page-faulted afresh; on this
VM the first touch of fresh memory costs about 1 ms per MB of system time.  Raising the thresholds
before the first large allocation lets freed blocks be reused.  A value the user set (``MALLOC_*_``
in the environment, read by glibc at start-up) wins; off glibc this does nothing.
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


def keep_freed_memory() -> None:
    if not sys.platform.startswith("linux"):
        return
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
    return {variable: str(value) for _, variable, value in SETTINGS if variable not in os.environ}
