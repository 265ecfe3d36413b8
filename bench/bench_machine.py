"""What two worker processes can gain on this machine: the same work alone and two at a time, printed.

    python bench/bench_machine.py [--rounds 5]

A 2-worker build can be at most twice as fast as a 1-worker one, and only if two processes run side by
side as fast as one alone.  Four kinds of work, each run alone and then as two processes at once, rounds
interleaved; printed: the CPU seconds of one process (median over rounds, both processes of a pair
counted), the ratio pair / alone and the range: numpy copies between arrays already in memory
(bandwidth), a sort, numpy writing fresh arrays (the first touch of new pages, which the passes' big
allocations pay in a fresh worker), and a pure-Python loop (the list scheduler's, the timing model's).

A ratio above 1 is what running two at a time costs each of them; it bounds what ``--workers 2`` can
gain on work of that kind.  A wide range is noise of the machine itself (on a VM whose host backs guest
pages lazily, the first touch of memory varies several times over from run to run).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys

SETUP = "import time, numpy as np\na = np.arange(20_000_000); b = np.empty_like(a); c = np.empty_like(a)\n" \
        "np.copyto(b, a); np.copyto(c, a)\nt = time.process_time()\n"
KINDS = {
    # copies between arrays whose pages are already there: memory bandwidth
    "numpy copies (bandwidth)": SETUP + "for _ in range(8):\n    np.copyto(b, a); np.copyto(c, b[::-1])\n",
    "numpy sort": SETUP + "for _ in range(3):\n    d = np.sort(c[:4_000_000])\n",
    # fresh arrays written once: the first touch of new pages (kernel and, in a VM, host)
    "numpy fresh pages (first touch)": SETUP + "for _ in range(3):\n    x = np.empty(50_000_000); x[:] = 1.0; del x\n",
    # the list scheduler's and the timing model's kind of loop
    "pure Python": "import time\nt = time.process_time(); s = 0\nfor i in range(6_000_000):\n    s += i * i % 7\n",
}
END = "print(time.process_time() - t)\n"


def run(code: str, n: int) -> list[float]:
    """CPU seconds of each of ``n`` processes running ``code`` at once."""
    procs = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True) for _ in range(n)]
    return [float(p.communicate()[0]) for p in procs]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    print(f"(machine: {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f} at start)")
    for label, body in KINDS.items():
        code = body + END
        alone: list[float] = []
        pair: list[float] = []
        for _ in range(args.rounds):
            alone += run(code, 1)
            pair += run(code, 2)
        a, p = statistics.median(alone), statistics.median(pair)
        print(f"{label}: alone {a:.3f} s CPU, two at a time {p:.3f} s CPU each: {p / a:.2f}x "
              f"(medians of {args.rounds} interleaved rounds; alone {min(alone):.3f}-{max(alone):.3f}, "
              f"two at a time {min(pair):.3f}-{max(pair):.3f})")
    print(f"(load {os.getloadavg()[0]:.1f} at the end)")


if __name__ == "__main__":
    main()
