"""BIR-JSON writer and loader: CPU per instruction, bytes per instruction, loader memory.

    python bench/bench_io.py [--sizes 1e5,1e6] [--reps 3] [--ordinary]

The module is the like-for-like nest of bench/nests.py unrolled (what
``full_unroll -unrollLevel 2`` writes: no dependencies), and the same after
``build_fdeps`` (every instruction then names two or three others).  For
each it prints, as medians over ``--reps`` runs in this process:

* writer CPU microseconds per instruction (``bir_json.save`` to a file,
  process CPU time: user + system, the kernel's share of writing included),
  and bytes per instruction of the file;
* loader CPU microseconds per instruction (``bir_json.load``);
* the loader's peak traced memory (tracemalloc, one extra run) over the
  loaded module's column bytes;
* with ``--ordinary``, the same loader through the ordinary (one object per
  instruction) reader, for scale.

Targets (printed, not asserted): writer <= 2 and loader <= 5 microseconds per
instruction at 1e6; loader peak <= 3x the columns.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from nests import shape_for, tusk_nest  # noqa: E402

from tusk.ir import bir_json  # noqa: E402
from tusk.ir.module import SCHEMAS, Module  # noqa: E402
from tusk.stages.deps import BuildFDeps  # noqa: E402
from tusk.stages.unroll import unroll_function  # noqa: E402

WRITER_TARGET, LOADER_TARGET, MEMORY_TARGET = 2.0, 5.0, 3.0


def unrolled(n: int, deps: bool) -> Module:
    m = tusk_nest(*shape_for(n))
    fn, _ = unroll_function(m.functions[0])
    out = Module([fn], m.arch, m.version, m.attributes)
    return BuildFDeps().run(out)[0] if deps else out


def column_bytes(m: Module) -> int:
    return sum(getattr(f, t).nbytes() for f in m.functions for t in SCHEMAS)


def cpu(f) -> tuple[float, object]:
    t0 = time.process_time()
    out = f()
    return time.process_time() - t0, out


def measure(m: Module, reps: int, ordinary: bool) -> dict:
    n = m.n_insts()
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "m.json")
        writes, loads, slow = [], [], []
        for _ in range(reps):
            writes.append(cpu(lambda: bir_json.save(m, path))[0])
            dt, back = cpu(lambda: bir_json.load(path))
            loads.append(dt)
        assert back == m, "the file does not read back as the module"
        size = os.path.getsize(path)
        if ordinary:
            slow.append(cpu(lambda: bir_json.load(path, fast=False))[0])
        del back
        tracemalloc.start()
        again = bir_json.load(path)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        cols = column_bytes(again)
    row = {"insts": n, "write_us": statistics.median(writes) / n * 1e6, "bytes": size / n,
           "load_us": statistics.median(loads) / n * 1e6, "peak_x": peak / cols}
    if slow:
        row["ordinary_us"] = slow[0] / n * 1e6
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="1e5,1e6")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--ordinary", action="store_true", help="also time the ordinary reader")
    args = ap.parse_args()
    print(f"{'module':>16} {'insts':>9} {'write us/inst':>14} {'B/inst':>7} {'load us/inst':>13} "
          f"{'load peak / columns':>20}" + (f" {'ordinary load us':>17}" if args.ordinary else ""))
    for text in args.sizes.split(","):
        n = int(float(text))
        for deps in (False, True):
            m = unrolled(n, deps)
            r = measure(m, args.reps, args.ordinary)
            del m
            label = f"{text}{' +deps' if deps else ''}"
            extra = f" {r['ordinary_us']:17.1f}" if "ordinary_us" in r else ""
            print(f"{label:>16} {r['insts']:>9} {r['write_us']:14.2f} {r['bytes']:7.0f} {r['load_us']:13.2f} "
                  f"{r['peak_x']:19.2f}x{extra}", flush=True)
    print(f"targets: writer <= {WRITER_TARGET} us/inst and loader <= {LOADER_TARGET} us/inst at 1e6; loader peak "
          f"<= {MEMORY_TARGET}x the column bytes")


if __name__ == "__main__":
    main()
