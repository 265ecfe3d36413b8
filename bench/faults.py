"""The whole fault suite (tests/fault_suite.py): hostile inputs and a faulty environment.

    python bench/faults.py [--seed 1] [--per-file 20] [--group 8] [--per-input 120] [--kill-rounds 8]
    python bench/faults.py --quick        # a CI-size run (a few minutes)

Every hostile file gets its own verdict (clean refusal, skipped, accepted, internal error, unnamed
refusal, traceback, hang, wrong exit) and its own timeout; the summary says what was watched for
stray writes (strace over the whole file system, or nothing) and prints the counts.  Exit 1 when a
bad verdict, a stray write, a hang or an output differing from a clean build was found.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests import fault_suite as fs  # noqa: E402

QUICK_KERNELS = ("tiled_exp.json", "tiled_matmul.json", "tensor_add.klr")  # the small corpus of --quick


def parts(args: argparse.Namespace, box: fs.Sandbox, rng: random.Random) -> list:
    small = QUICK_KERNELS if args.quick else None
    bir_small = tuple(k for k in QUICK_KERNELS if k.endswith(".json")) if args.quick else None
    h = dict(group=args.group, per_input=args.per_input)
    half = args.kill_rounds // 2
    return [
        ("truncated and bit-flipped KLR files", lambda: fs.hostile(box, fs.klr_mutations(rng, args.per_file),
                                                                  "klr", **h)),
        ("BIR-JSON files, random single-value changes",
         lambda: fs.hostile(box, fs.bir_mutations(rng, args.per_file), "bir", **h)),
        ("BIR-JSON files, multi-value changes (products, sums, zero sizes, overlaps)",
         lambda: fs.hostile(box, fs.bir_product_mutations(kernels=bir_small), "bir-product", **h)),
        ("KLR files written with multi-value changes",
         lambda: fs.hostile(box, fs.klr_product_mutations(), "klr-product", **h)),
        ("kill and rebuild, in-process", lambda: fs.kill_rounds(box, rng, half, "0", small)),
        ("kill and rebuild, 2 workers", lambda: fs.kill_rounds(box, rng, args.kill_rounds - half, "2", small)),
        ("two builds at once", lambda: fs.concurrent_builds(box, small)),
        ("a full disk, then the same build into the same cache",
         lambda: fs.full_disk(box, (0.5,) if args.quick else (0.1, 0.5, 0.9), small)),
    ]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--per-file", type=int, default=None,
                    help="random mutations of every corpus KLR and BIR-JSON file (20; --quick 2)")
    ap.add_argument("--group", type=int, default=8, help="hostile files per build (1: every file alone)")
    ap.add_argument("--per-input", type=float, default=120, help="seconds a file built alone may take")
    ap.add_argument("--kill-rounds", type=int, default=None, help="kill-and-rebuild rounds, half with 2 workers "
                    "(8; --quick 2)")
    ap.add_argument("--quick", action="store_true", help="a CI-size run: few random mutations, the multi-value "
                    "ones of 3 kernels, a 3-kernel corpus for the environment cases")
    args = ap.parse_args()
    args.per_file = args.per_file if args.per_file is not None else 2 if args.quick else 20
    args.kill_rounds = args.kill_rounds if args.kill_rounds is not None else 2 if args.quick else 8
    box = fs.Sandbox()
    total = fs.Counts()
    t0 = time.time()
    print(f"stray writes: {box.watching()}")
    try:
        for title, run in parts(args, box, random.Random(args.seed)):
            t = time.time()
            c = run()
            total.add(c)
            print(f"== {title} ({time.time() - t:.0f} s): {c.inputs} inputs "
                  f"{dict(c.verdicts) if c.verdicts else ''}, {c.builds} commands ({c.watched} watched), "
                  f"bad {c.bad()}", flush=True)
            for line in c.bad_inputs + c.stray_writes + c.notes[:8]:
                print("   " + line.strip().replace("\n", "\n   ")[:1500])
        print(f"\n== totals ({time.time() - t0:.0f} s{', --quick' if args.quick else ''})")
        print(f"stray writes: {box.watching()}")
        print("\n".join(total.lines()))
        return 1 if total.bad() else 0
    finally:
        box.close()


if __name__ == "__main__":
    sys.exit(main())
