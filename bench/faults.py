"""The whole fault suite (tests/fault_suite.py): hostile inputs and a faulty environment.

    python bench/faults.py [--seed 1] [--per-file 40] [--kill-rounds 20]

Prints what was tried and how it ended; tracebacks, hangs, outputs that
differ from a clean build and files written outside the output and cache
directories must all be 0.  CI runs a small sample (tests/test_faults.py).
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests import fault_suite as fs  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--per-file", type=int, default=40, help="mutations of every corpus KLR and BIR-JSON file")
    ap.add_argument("--kill-rounds", type=int, default=20, help="kill-and-rebuild rounds (half with 2 workers)")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    box = fs.Sandbox()
    total = fs.Counts()
    t0 = time.time()
    try:
        parts = [
            ("truncated and bit-flipped KLR files", lambda: fs.hostile_batch(box, fs.klr_mutations(rng, args.per_file),
                                                                            "klr")),
            ("mutated BIR-JSON files", lambda: fs.hostile_batch(box, fs.bir_mutations(rng, args.per_file), "bir")),
            ("kill and rebuild, in-process", lambda: fs.kill_rounds(box, rng, args.kill_rounds // 2, "0")),
            ("kill and rebuild, 2 workers", lambda: fs.kill_rounds(box, rng, args.kill_rounds - args.kill_rounds // 2,
                                                                  "2")),
            ("two builds at once", lambda: fs.concurrent_builds(box)),
            ("a full disk", lambda: fs.full_disk(box)),
        ]
        for title, run in parts:
            t = time.time()
            c = run()
            total.add(c)
            print(f"== {title} ({time.time() - t:.0f} s): {c.inputs} inputs, {c.clean_errors} clean errors, "
                  f"{c.internal_errors} internal, bad {c.bad()}")
            for note in c.notes[:5]:
                print("   " + note.strip().replace("\n", "\n   ")[:1500])
        print(f"\n== totals ({time.time() - t0:.0f} s)")
        print("\n".join(total.lines()))
        return 1 if total.bad() else 0
    finally:
        box.close()


if __name__ == "__main__":
    sys.exit(main())
