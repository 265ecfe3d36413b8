"""The instruction budgets every unrolling pass checks before it allocates anything.

* The backend's hard ceiling (seed 000): the post-unroll total must stay
  below 25,000,000 instructions (the binary's literal is 24,999,999 with a
  strict compare); the message is the backend's.
* A module's configurable budget, ``max_instruction_limit`` (instCountFitsLimit).
* Memory: planning and building N instructions takes about
  ``BYTES_PER_INSTRUCTION`` bytes each; a plan that would not fit in the
  memory available now is refused with both figures, instead of growing
  until the machine swaps or the kernel kills the process.
"""

from __future__ import annotations

from tusk.ir.errors import PassError

CEILING = 25_000_000
TOO_MANY = ("Compiler generated too many instructions, this may due to a failure in parallelism extraction "
            "by the tensorizer !")
# What one unrolled instruction costs while it is planned and built: its plan entries (row, axis values,
# iteration, keep flag), its instruction row (~35 B) and ~3 operand rows (~40 B each), plus temporaries.
BYTES_PER_INSTRUCTION = 400


def instruction_limit_check(total_count: int) -> None:
    """Fails unless ``total_count < 25000000`` (24,999,999 passes, 25,000,000 fails)."""
    if not total_count < CEILING:
        raise PassError(f"{TOO_MANY} (total_count={total_count}, must be < {CEILING})")


def check_instruction_limit(total: int, limit: int | None) -> None:
    """instCountFitsLimit: the module's configurable budget (max_instruction_limit)."""
    if limit is not None and total > limit:
        raise PassError(f"Unroll: too many instructions after unrolling: total_count={total}, "
                        f"max_instruction_limit={limit}")


def memory_check(count: int, what: str = "unrolling") -> None:
    """Refuse to plan ``count`` instructions when they would not fit in the memory available now."""
    need = count * BYTES_PER_INSTRUCTION
    available = _available_memory()
    if available is None:
        return
    if need > available:
        raise PassError(f"{what} would build {count:,} instructions, needing about {need / 2**30:,.1f} GiB of memory; "
                        f"{available / 2**30:,.1f} GiB are available (the backend's ceiling is {CEILING:,})")


def _available_memory() -> int | None:
    """Bytes of memory available now: Linux's MemAvailable (no psutil import, which costs start-up more
    than the unroll of a small nest), else psutil's figure, else None (unknown: not checked)."""
    try:
        with open("/proc/meminfo", "rb") as fh:
            for line in fh:
                if line.startswith(b"MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        import psutil  # a dependency of dask.distributed

        return int(psutil.virtual_memory().available)
    except (ImportError, OSError):
        return None
