"""`full_unroll INPUT -o OUTPUT -unrollLevel N -verbose L`: the standalone binary's driver.

Mirrors neuronxcc's ``full_unroll``: single-dash long flags (``--`` works
too), ``-unrollLevel`` defaults to 0 (memloc generation only), ``-verbose``
is the console log level (default 30, warnings).  It loads BIR-JSON, runs
FullUnroll with the same level gating and 25M ceiling, saves; exits 1
when the input file is at fault, 2 when the command or the machine is (a
missing file), as ``tusk`` does.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys

from tusk.ir.errors import EXIT_CODES, TuskError, fault_of
from tusk.workflows.blas_threads import one_blas_thread


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="full_unroll", description="Run FullUnroll on a BIR-JSON module.")
    p.add_argument("input", help="input BIR-JSON file")
    p.add_argument("-o", "--o", dest="output", required=True, help="output file name")
    p.add_argument("-unrollLevel", "--unrollLevel", dest="level", type=int, default=0,
                   help="0: only memloc generation (default); 1: unroll some; 2: unroll all")
    p.add_argument("-verbose", "--verbose", dest="verbose", type=int, default=30,
                   help="console log level (default 30)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    one_blas_thread()
    args = parse_args(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(level=args.verbose, format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    from tusk.ir import bir_json
    from tusk.stages.full_unroll import FullUnroll

    if not os.path.isfile(args.input):  # the command's fault (exit 2), as `tusk show` says it
        what = "is a directory" if os.path.isdir(args.input) else "no such file"
        print(f"full_unroll: error: {args.input}: {what}", file=sys.stderr)
        return 2
    try:
        module = bir_json.load(args.input)
        out, stats = FullUnroll(level=args.level).run(module)
        bir_json.save(out, args.output)
    except TuskError as e:
        print(f"full_unroll: error: {e}", file=sys.stderr)
        return EXIT_CODES[fault_of(e)]  # as tusk: 1 the file is at fault, 2 the command or the machine
    except OSError as e:  # the machine's or the command's (a missing output directory, a full disk): exit 2
        print(f"full_unroll: error: {args.output}: cannot write: {e.strerror or e}", file=sys.stderr)
        return EXIT_CODES[fault_of(e)]
    logging.getLogger("tusk.full_unroll").info("wrote %s (%d instructions)", args.output, stats["insts_after"])
    return 0


def command() -> None:
    """The console entry point: ``main``, then leave without tearing the interpreter down (``entry.leave``).

    Everything is written, closed and flushed by then; freeing a million-instruction module object
    by object and finalising every imported module costs ~0.1 s of CPU (a quarter of a 1e5 run) and
    changes nothing on disk, so the process ends as compilers' drivers do (clang's -disable-free).
    """
    from tusk.workflows.entry import leave
    from tusk.workflows.malloc_setup import keep_freed_memory

    keep_freed_memory()
    leave(main())


if __name__ == "__main__":
    command()
