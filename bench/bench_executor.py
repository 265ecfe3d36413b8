"""Two settings of a build's processes, each against Dask's or numpy's default, in one run, printed.

    python bench/bench_executor.py [--rounds 5] [--tasks 60]

1. **Hand-offs** (``executors.quicker_round_trips``): a 1-worker local cluster as ``tusk compile`` starts
   it; ``--tasks`` no-op tasks in a row through ``DaskExecutor`` (submit, then wait for the answer, as a
   kernel's chain does), with Dask's batching intervals (10 ms client -> scheduler, 5 ms scheduler ->
   worker) and with Tusk's 2 ms, rounds interleaved on the same cluster; median milliseconds per task.
2. **Huge pages** (``malloc_setup``): six fresh 200 MB ``np.ones`` in a fresh process, with numpy's
   huge-page request on (``NUMPY_MADVISE_HUGEPAGE=1``) and off (``0``), rounds interleaved; wall seconds
   per array: median and range.  Where the kernel's THP ``defrag`` setting compacts memory at fault time
   (it is printed), the request makes first touches slow from time to time; elsewhere it may not.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FRESH = ("import time, numpy as np\nkeep = []\nfor _ in range(6):\n    t = time.perf_counter()\n"
         "    keep.append(np.ones(25_000_000))\n    print(time.perf_counter() - t)\n")


def _noop(i: int) -> dict:
    return {"i": i}


def hand_offs(rounds: int, n: int) -> None:
    from tusk.workflows.executors import local_cluster_executor

    ex = local_cluster_executor(1)
    try:
        ex.warm_up([])
        streams = [ex.client.scheduler_comm, *ex.cluster.scheduler.stream_comms.values()]
        dask_intervals = [0.010, *[0.005] * (len(streams) - 1)]
        tusk_intervals = [s.interval for s in streams]
        got: dict[str, list[float]] = {"Dask's intervals": [], "Tusk's (2 ms)": []}
        for r in range(rounds):
            for label, intervals in (("Dask's intervals", dask_intervals), ("Tusk's (2 ms)", tusk_intervals)):
                for s, v in zip(streams, intervals):
                    s.interval = v
                for i in range(n):
                    t = time.perf_counter()
                    ex.submit(f"noop-{r}-{label[:4]}-{i}", _noop, i)
                    ex.next()
                    got[label].append(time.perf_counter() - t)
        a, b = (statistics.median(v) * 1e3 for v in got.values())
        print(f"hand-offs, {n} no-op tasks in a row x {rounds} rounds on a 1-worker local cluster: Dask's intervals "
              f"{a:.1f} ms per task, Tusk's {b:.1f} ms (medians): {a / b:.2f}x")
    finally:
        ex.close()


def huge_pages(rounds: int) -> None:
    try:
        defrag = Path("/sys/kernel/mm/transparent_hugepage/defrag").read_text().strip()
    except OSError:
        defrag = "(not readable)"
    got: dict[str, list[float]] = {"1": [], "0": []}
    for _ in range(rounds):
        for flag in got:
            env = {**os.environ, "NUMPY_MADVISE_HUGEPAGE": flag}
            out = subprocess.run([sys.executable, "-c", FRESH], env=env, capture_output=True, text=True, check=True)
            got[flag] += [float(x) for x in out.stdout.split()]
    on, off = got["1"], got["0"]
    print(f"huge pages (THP defrag: {defrag}), fresh 200 MB arrays, {len(on)} each way: numpy's request on "
          f"{statistics.median(on):.3f} s per array (range {min(on):.3f}-{max(on):.3f}), off "
          f"{statistics.median(off):.3f} s ({min(off):.3f}-{max(off):.3f}); sum on / off "
          f"{sum(on) / sum(off):.2f}x")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--tasks", type=int, default=60)
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    print(f"(machine: {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f} at start)")
    hand_offs(args.rounds, args.tasks)
    huge_pages(args.rounds)
    print(f"(load {os.getloadavg()[0]:.1f} at the end)")


if __name__ == "__main__":
    main()
