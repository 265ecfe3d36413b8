"""BIR-JSON writer and loader: CPU per instruction, bytes per instruction, loader memory.

    python bench/bench_io.py [--sizes 1e5,1e6] [--reps 3] [--ordinary]
                             [--real FILE | --build-real DIR] [--slice N]

The modules:

* the like-for-like nest of bench/nests.py unrolled (what ``full_unroll
  -unrollLevel 2`` writes: no dependencies), and the same after
  ``build_fdeps`` (every instruction then names two or three others);
* the real target: the final output of a build of
  examples/large_kernels/large_matmul.json through the default pipeline --
  scheduled, rotated (1.24M instructions, 2.3 dependencies per instruction,
  rotated buffers and per-clone attribute records: many distinct templates).
  ``--build-real DIR`` builds it (``tusk compile examples/large_kernels -o
  DIR/out --workers 0 --no-report`` with the cache in DIR/cache; a second run
  reuses the cache) and measures DIR/out/large_matmul/large_matmul.bir.json;
  ``--real FILE`` measures a file built that way before.  The module measured
  is that file read back, and the writer must reproduce the file byte for byte.
  ``--slice N`` also measures its first N instructions (quick iterations).

For each it prints, as medians over ``--reps`` runs in this process:

* writer CPU microseconds per instruction (``bir_json.save`` to a file,
  process CPU time: user + system, the kernel's share of writing included),
  and bytes per instruction of the file;
* loader CPU microseconds per instruction (``bir_json.load``, user + system);
* the loader's peak traced memory (tracemalloc, one extra run) over the
  loaded module's column bytes;
* with ``--ordinary``, the same loader through the ordinary (one object per
  instruction) reader, for scale.

Targets (printed, not asserted): writer <= 2 and loader <= 5 microseconds per
instruction at 1e6; on the real module writer <= 2 and loader <= 3; loader
peak <= 3x the columns.  The load average is printed at the start and the end:
CPU figures move with it on a shared machine.
"""

from __future__ import annotations

import argparse
import filecmp
import os
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))

from nests import shape_for, tusk_nest  # noqa: E402

from tusk.ir import bir_json  # noqa: E402
from tusk.ir.module import SCHEMAS, Module  # noqa: E402
from tusk.stages.build_fdeps import BuildFDeps  # noqa: E402
from tusk.stages.unroll import unroll_function  # noqa: E402

WRITER_TARGET, LOADER_TARGET, MEMORY_TARGET = 2.0, 5.0, 3.0
REAL_WRITER_TARGET, REAL_LOADER_TARGET = 2.0, 3.0


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


ROOT = Path(__file__).resolve().parent.parent


def build_real(work: Path) -> Path:
    """The final BIR-JSON of large_matmul built through the default pipeline (cached in ``work``)."""
    out = work / "out"
    env = {**os.environ, "TUSK_CACHE_DIR": str(work / "cache")}
    cmd = [sys.executable, "-m", "tusk", "compile", str(ROOT / "examples" / "large_kernels"), "-o", str(out),
           "--workers", "0", "--no-report"]
    print(f"building: TUSK_CACHE_DIR={work / 'cache'} {' '.join(cmd[1:])}", flush=True)
    subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL)
    return out / "large_matmul" / "large_matmul.bir.json"


def first_rows(m: Module, k: int) -> Module:
    """``m`` with its largest function cut to its first ``k`` rows (edges to later rows dropped)."""
    big = max(m.functions, key=lambda f: len(f.insts))
    fns = [f.take_insts(np.arange(min(k, len(f.insts)))) if f is big else f for f in m.functions]
    return Module(fns, m.arch, m.version, m.attributes, m.artifact_dir, m.queues, m.extras)


def measure(m: Module, reps: int, ordinary: bool, same_as: str | None = None) -> dict:
    n = m.n_insts()
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "m.json")
        writes, loads, slow = [], [], []
        for _ in range(reps):
            writes.append(cpu(lambda: bir_json.save(m, path))[0])
            dt, back = cpu(lambda: bir_json.load(path))
            loads.append(dt)
        assert back == m, "the file does not read back as the module"
        if same_as is not None:
            assert filecmp.cmp(path, same_as, shallow=False), "the writer's bytes differ from the build's file"
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
    ap.add_argument("--real", type=Path, help="a real build's final BIR-JSON (large_matmul's, see above)")
    ap.add_argument("--build-real", type=Path, metavar="DIR",
                    help="build large_matmul's final BIR-JSON into DIR (cached there) and measure it")
    ap.add_argument("--slice", type=int, default=0, help="with a real module: also its first N instructions")
    args = ap.parse_args()
    if args.build_real:
        args.real = build_real(args.build_real)
    print(f"(load average {os.getloadavg()[0]:.1f} at start)")
    print(f"{'module':>16} {'insts':>9} {'write us/inst':>14} {'B/inst':>7} {'load us/inst':>13} "
          f"{'load peak / columns':>20}" + (f" {'ordinary load us':>17}" if args.ordinary else ""))
    if args.real:
        real = bir_json.load(args.real)
        if args.slice:
            show(f"real[:{args.slice // 1000}k]", measure(first_rows(real, args.slice), args.reps, args.ordinary))
        show("large_matmul", measure(real, args.reps, args.ordinary, same_as=str(args.real)))
        del real
    for text in filter(None, args.sizes.split(",")):
        n = int(float(text))
        for deps in (False, True):
            m = unrolled(n, deps)
            r = measure(m, args.reps, args.ordinary)
            del m
            show(f"{text}{' +deps' if deps else ''}", r)
    print(f"targets: writer <= {WRITER_TARGET} us/inst and loader <= {LOADER_TARGET} us/inst at 1e6; on the real "
          f"module writer <= {REAL_WRITER_TARGET} and loader <= {REAL_LOADER_TARGET}; loader peak "
          f"<= {MEMORY_TARGET}x the column bytes  (load average {os.getloadavg()[0]:.1f} at the end)")


def show(label: str, r: dict) -> None:
    extra = f" {r['ordinary_us']:17.1f}" if "ordinary_us" in r else ""
    print(f"{label:>16} {r['insts']:>9} {r['write_us']:14.2f} {r['bytes']:7.0f} {r['load_us']:13.2f} "
          f"{r['peak_x']:19.2f}x{extra}", flush=True)


if __name__ == "__main__":
    main()
