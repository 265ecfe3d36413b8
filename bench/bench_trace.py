"""NKI front end: trace time per corpus kernel, and trace time against the traced program's size.

    python bench/bench_trace.py [--reps 5] [--sizes 250,1000,4000,16000]

Part 1 traces every unit of examples/nki/tusk.toml (file execution, the
kernel run on symbolic tensors, tile placement and the KLR write: exactly
what ``tusk trace`` does in-process) and prints the median wall time, the
KLR statements written and microseconds per statement.

Part 2 traces one synthetic kernel whose ``nl.static_range(n)`` loop unrolls
into 4n KLR statements (two loads, an add, a store per step, each tile a
fresh SBUF buffer that the placer must fit around the live ones) for growing
n, and prints microseconds per statement and the growth ratio between sizes:
near-linear tracing means the ratio of times stays near the ratio of sizes.
A second kernel wraps each step's body in an ``nl.affine_range(2)`` loop (a
dynamic loop per step: placement must not look at every loop for every tile).
The ratios use the best process (CPU) time of the repetitions: on a shared
machine the median wall time swings by a third between runs.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import tomllib
from pathlib import Path

from tusk.frontend import trace_file
from tusk.ir import klr

CORPUS = Path(__file__).resolve().parent.parent / "examples" / "nki"

SYNTHETIC = '''
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl

@nki.jit
def chain(a, b):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    ip = nl.arange(128)[:, None]
    jf = nl.arange(64)[None, :]
    for t in nl.static_range(a.shape[0] // 128):
        x = nl.load(a[t * 128 + ip, jf])
        y = nl.load(b[t * 128 + ip, jf])
        nl.store(out[t * 128 + ip, jf], value=nl.add(x, y))
    return out
'''

LOOPED = SYNTHETIC.replace("jf = nl.arange(64)", "jf = nl.arange(32)").replace(
    "        x = nl.load(a[t * 128 + ip, jf])\n        y = nl.load(b[t * 128 + ip, jf])\n"
    "        nl.store(out[t * 128 + ip, jf], value=nl.add(x, y))",
    "        for h in nl.affine_range(2):\n            x = nl.load(a[t * 128 + ip, h * 32 + jf])\n"
    "            y = nl.load(b[t * 128 + ip, h * 32 + jf])\n"
    "            nl.store(out[t * 128 + ip, h * 32 + jf], value=nl.add(x, y))")


def statements(data: bytes) -> int:
    kernel = klr.read_klr(data).contents.kernel
    return sum(len(b.body) for body in kernel.bodies for b in body)


def timed(fn, reps: int) -> tuple[float, bytes]:
    wall, _, out = _timed(fn, reps)
    return wall, out


def _timed(fn, reps: int) -> tuple[float, float, bytes]:
    """Median wall time, best CPU time, the last result."""
    times, cpu, out = [], [], b""
    for _ in range(reps):
        t0, c0 = time.perf_counter(), time.process_time()
        out = fn()
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    return statistics.median(times), min(cpu), out


def corpus(reps: int) -> None:
    units = tomllib.loads((CORPUS / "tusk.toml").read_text()).get("kernels", {})
    print(f"== trace time per corpus kernel ({len(units)} units, median of {reps})")
    print(f"{'unit':<20} {'ms':>8} {'statements':>11} {'us/statement':>13}")
    total = 0.0
    for name, unit in units.items():
        def run(unit=unit, name=name):
            return trace_file(CORPUS / unit["file"], unit.get("function"), unit["inputs"],
                              tuple(unit.get("grid", ())), name=name)
        t, data = timed(run, reps)
        n = statements(data)
        total += t
        print(f"{name:<20} {t * 1e3:8.1f} {n:11d} {t * 1e6 / max(n, 1):13.1f}")
    print(f"{'all':<20} {total * 1e3:8.1f}")


def scaling(sizes: list[int], reps: int) -> None:
    for title, source in (("synthetic chain kernel", SYNTHETIC), ("the same, each step an affine_range(2)", LOOPED)):
        print(f"\n== trace time against program size ({title}; wall: median of {reps}, cpu: best of {reps})")
        print(f"{'steps':>7} {'statements':>11} {'wall ms':>9} {'cpu ms':>9} {'cpu us/stmt':>12} {'time ratio':>11} "
              f"{'size ratio':>11}")
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "chain.py"
            path.write_text(source)
            prev = None
            for n in sizes:
                spec = f"f32[{128 * n},64]"
                wall, cpu, data = _timed(lambda spec=spec: trace_file(path, "chain", [spec, spec]), reps)
                stmts = statements(data)
                ratio = "" if prev is None else f"{cpu / prev[0]:11.2f} {stmts / prev[1]:11.2f}"
                print(f"{n:7d} {stmts:11d} {wall * 1e3:9.1f} {cpu * 1e3:9.1f} {cpu * 1e6 / stmts:12.1f} {ratio}")
                prev = (cpu, stmts)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--sizes", default="250,1000,4000,16000", help="static_range steps of the synthetic kernel")
    args = ap.parse_args(argv)
    corpus(args.reps)
    scaling([int(float(s)) for s in args.sizes.split(",")], max(1, args.reps // 2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
