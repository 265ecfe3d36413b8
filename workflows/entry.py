"""The ``tusk`` command's entry point: a rebuild that would change nothing is answered from the no-op
index (``tusk.workflows.noop``), and the same build into a new ``-o`` from the reuse note
(``tusk.workflows.reuse``), before anything heavy is imported; every other command goes to the typer
application in ``tusk.workflows.cli``."""

from __future__ import annotations

import sys
import time

from tusk.workflows.blas_threads import one_blas_thread


def main() -> None:
    started = time.perf_counter()
    one_blas_thread()
    argv = sys.argv[1:]
    if argv[:1] == ["compile"]:  # the other commands need neither (nor noop's hashlib and json)
        shortcut(argv, started)
    from tusk.workflows.cli import main as cli_main

    cli_main()


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
