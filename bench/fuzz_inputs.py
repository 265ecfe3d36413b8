"""Changed kernels run in this process (tests/mutated_inputs.py): translate, the default pipeline, the verifier
and the interpreter on each; prints the outcomes and the internal errors found.

    python bench/fuzz_inputs.py [--seed 1] [--cases 500] [--kind klr|bir]

Exit 1 when an internal error was found.  The CLI-level fault suite (bench/faults.py) covers what the
commands do with hostile files (exit codes, stray writes, interruptions); this one reaches the interpreter
too and runs many more cases a minute.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.mutated_inputs import fuzz  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--cases", type=int, default=500, help="changed kernels of each kind")
    ap.add_argument("--kind", choices=("klr", "bir"), action="append", help="only this kind (default: both)")
    args = ap.parse_args()
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="tusk-fuzz-") as work:
        found = fuzz(args.seed, args.cases, Path(work), tuple(args.kind or ("klr", "bir")))
    print(f"seed {args.seed}: {json.dumps(found['counts'])} in {time.perf_counter() - t0:.0f} s; slowest case "
          f"{found['slowest']['seconds']} s (a changed {found['slowest']['kernel']})")
    for e in found["internal"]:
        print(f"\ninternal error on a changed {e['kernel']}: {e['error']}\n{e['where']}")
    return 1 if found["counts"]["internal"] else 0


if __name__ == "__main__":
    sys.exit(main())
