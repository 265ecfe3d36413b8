"""The ``tusk`` command's entry point: a rebuild that would change nothing is answered from the no-op
index (``tusk.workflows.noop``) before anything heavy is imported; every other command goes to the
typer application in ``tusk.workflows.cli``."""

from __future__ import annotations

import sys
import time


def main() -> None:
    started = time.perf_counter()
    argv = sys.argv[1:]
    from tusk.workflows import noop

    index = noop.check(argv)
    if index is not None:
        sys.stdout.flush()
        sys.exit(noop.print_summary(index, time.perf_counter() - started))
    noop.ARGV = argv  # the build writes the index for this command line when it succeeds
    from tusk.workflows.cli import main as cli_main

    cli_main()
