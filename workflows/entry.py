"""The ``tusk`` command's entry point: a rebuild that would change nothing is answered from the no-op
index (``tusk.workflows.noop``), and the same build into a new ``-o`` from the reuse note
(``tusk.workflows.reuse``), before anything heavy is imported; every other command goes to the typer
application in ``tusk.workflows.cli``."""

from __future__ import annotations

import logging
import os
import sys
import time

from tusk.workflows.blas_threads import one_blas_thread


def main() -> None:
    started = time.perf_counter()
    one_blas_thread()
    argv = sys.argv[1:]
    if argv[:1] == ["compile"]:  # the other commands need neither (nor noop's hashlib and json)
        shortcut(argv, started)
        from tusk.workflows.malloc_setup import keep_freed_memory

        keep_freed_memory()  # a build's numpy temporaries reuse freed memory: 1.4 s of system time on large_matmul
    from tusk.workflows.cli import main as cli_main

    cli_main()


def command() -> None:
    """The console entry point: :func:`main`, then :func:`leave`.

    By then every output is written and closed and a local cluster's workers are gone (the build waits
    for them and kills what is left).  Finalising Dask, numpy and every imported module, and freeing
    the modules a build held, took 0.1-0.4 s of wall after the last line was printed (the 8-kernel build,
    2 workers).  An interrupt (KeyboardInterrupt) takes Python's normal way out.
    """
    try:
        main()
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        if not isinstance(e.code, (int, type(None))):
            print(e.code, file=sys.stderr)  # what sys.exit("text") prints on the normal way out
    leave(code)


def leave(code: int) -> None:
    """End the process with ``code`` without tearing the interpreter down, as compilers' drivers do
    (clang's -disable-free): logs closed and streams flushed first; a stream that cannot be flushed
    (a closed pipe) takes Python's normal way out.  Both console entries (``tusk``, ``full_unroll``)."""
    logging.shutdown()
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (BrokenPipeError, ValueError):
        sys.exit(code)
    os._exit(code)


def shortcut(argv: list[str], started: float) -> None:
    """Exit here if the no-op index or the reuse note answers this ``tusk compile`` command."""
    from tusk.workflows import noop, reuse

    index = noop.check(argv)
    if index is not None:
        sys.stdout.flush()
        sys.exit(noop.print_summary(index, time.perf_counter() - started))
    code = reuse.attempt(argv, started)
    if code is not None:
        sys.exit(code)
    noop.ARGV = argv  # the build writes the index for this command line when it succeeds
