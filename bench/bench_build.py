"""Build-system benchmark: parallel speed-up, overhead around the passes, incremental rebuilds, store size.

    python bench/bench_build.py [--repeat 3] [--quick] [--keep DIR]

Every timing is a whole ``tusk compile`` command (interpreter start-up
included), modes interleaved within each repetition; the figures are
medians.  Printed, never asserted.  Targets (issue 12) in brackets:

1. 8 independent kernels of >= 50k instructions each, cold cache:
   ``--workers 2`` against ``--workers 1`` [>= 1.7x] and against the
   fastest serial mode, ``--workers 0`` (in-process) [>= 1.3x];
2. the 1.2M-instruction ``examples/large_kernels/large_matmul.json`` alone:
   2 workers against 1 [>= 1.4x], and wall time against the sum of its
   passes' own run time [<= 2x];
3. the shipped corpus (``examples/kernels``, with its ``shared_constants``):
   no-op rebuild [< 3 % of cold], one late pass changed [< 30 %], a second
   ``-o`` with the same cache [0 passes run];
4. store bytes against BIR-JSON bytes, over modules of >= 1000 instructions
   and over all.

Each run's ``--json`` report gives the passes' own run time and where the
rest went (fetch, hash, store, hand-over), printed beside the wall time.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples" / "kernels"
LARGE = ROOT / "examples" / "large_kernels" / "large_matmul.json"


def tusk(corpus: Path, out: Path, cache: Path, *extra: str) -> tuple[float, dict]:
    """One whole `tusk compile` command: (wall seconds, its --json report)."""
    t = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "tusk", "compile", str(corpus), "-o", str(out), "--cache-dir",
                           str(cache), "--json", *extra], capture_output=True, text=True, cwd=str(out.parent))
    wall = time.perf_counter() - t
    if proc.returncode != 0:
        raise SystemExit(f"tusk compile failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return wall, json.loads(proc.stdout)


def pass_time(report: dict) -> dict[str, float]:
    """Seconds of the executed steps, by kind: run (the passes themselves), fetch, hash, store, handover."""
    out = dict.fromkeys(("run", "fetch", "hash", "store", "handover"), 0.0)
    for k in report["kernels"]:
        for u in k.get("units", []):
            for s in u["steps"]:
                if s["status"] == "executed":
                    for key in out:
                        v = s.get("timing", {}).get(key)
                        out[key] += v if isinstance(v, float) else 0.0
    return out


def fresh(*dirs: Path) -> None:
    for d in dirs:
        shutil.rmtree(d, ignore_errors=True)


def compare(work: Path, corpus: Path, modes: dict[str, tuple[str, ...]], repeat: int) -> dict[str, list]:
    """Cold builds of ``corpus`` in every mode, interleaved: mode -> [(wall, report), ...]."""
    runs: dict[str, list] = {m: [] for m in modes}
    for r in range(repeat):
        for mode, extra in modes.items():
            out, cache = work / f"out-{mode}", work / f"cache-{mode}"
            fresh(out, cache)
            runs[mode].append(tusk(corpus, out, cache, *extra))
    return runs


def median_wall(runs: list) -> float:
    return statistics.median(w for w, _ in runs)


def describe(runs: list) -> str:
    wall = median_wall(runs)
    rep = min(runs, key=lambda r: abs(r[0] - wall))[1]
    t = pass_time(rep)
    return (f"{wall:7.2f} s  (passes {t['run']:.2f} s; fetch {t['fetch']:.2f}, hash {t['hash']:.2f}, "
            f"store {t['store']:.2f}, hand-over {t['handover']:.2f}; {rep['executed']} steps; {rep['executor']})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeat", type=int, default=3, help="interleaved repetitions per figure (medians)")
    ap.add_argument("--quick", action="store_true", help="smaller kernels (a smoke test of the script)")
    ap.add_argument("--keep", type=Path, help="work in this directory and keep it")
    args = ap.parse_args()
    work = args.keep or Path(tempfile.mkdtemp(prefix="tusk-bench-build-"))
    work.mkdir(parents=True, exist_ok=True)
    sys.path.insert(0, str(ROOT))
    from tests.programs import tiled_exp_module
    from tusk.ir import bir_json

    try:
        print(f"(machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at start)")
        # 1 ----------------------------------------------------------------------------------------
        tiles = 2_000 if args.quick else 17_000  # load, exp, store per tile: 51k instructions
        eight = work / "eight"
        fresh(eight)
        eight.mkdir()
        for k in range(8):
            bir_json.save(tiled_exp_module(tiles=tiles, width=128 + k), eight / f"tiled{k}.json")
        print(f"\n== 8 independent kernels of {3 * tiles:,} instructions, cold, {args.repeat} interleaved runs ==")
        runs = compare(work, eight, {"serial": ("--workers", "0"), "1 worker": ("--workers", "1"),
                                     "2 workers": ("--workers", "2")}, args.repeat)
        for mode, r in runs.items():
            print(f"{mode:10s} {describe(r)}")
        w0, w1, w2 = (median_wall(runs[m]) for m in ("serial", "1 worker", "2 workers"))
        print(f"2 workers vs 1: {w1 / w2:.2f}x [>= 1.7x]   vs serial in-process: {w0 / w2:.2f}x [>= 1.3x]")

        # 2 ----------------------------------------------------------------------------------------
        large = work / "large"
        fresh(large)
        large.mkdir()
        shutil.copy(LARGE, large / LARGE.name)
        print(f"\n== {LARGE.name} (1,236,992 instructions after unroll), cold, {args.repeat} interleaved runs ==")
        runs = compare(work, large, {"1 worker": ("--workers", "1"), "2 workers": ("--workers", "2"),
                                     "serial": ("--workers", "0")}, args.repeat)
        for mode, r in runs.items():
            print(f"{mode:10s} {describe(r)}")
        w1, w2 = median_wall(runs["1 worker"]), median_wall(runs["2 workers"])
        passes = statistics.median(pass_time(rep)["run"] for _, rep in runs["2 workers"])
        print(f"2 workers vs 1: {w1 / w2:.2f}x [>= 1.4x]   wall / passes' run time (2 workers): "
              f"{w2 / passes:.2f} [<= 2]")

        # 3 ----------------------------------------------------------------------------------------
        corpus = work / "corpus"
        fresh(corpus)
        shutil.copytree(EXAMPLES, corpus)
        print(f"\n== the shipped corpus ({len([p for p in corpus.iterdir() if p.is_file()])} files), "
              f"{args.repeat} runs ==")
        cold, noop, late, second = [], [], [], []
        for r in range(args.repeat):
            out, cache = work / "out-inc", work / "cache-inc"
            fresh(out, cache, work / "out-second")
            c, rc = tusk(corpus, out, cache)
            n, rn = tusk(corpus, out, cache)
            lt, rl = tusk(corpus, out, cache, "--set", "build_fdeps.ordered=false")
            s, rs = tusk(corpus, work / "out-second", cache, "--set", "build_fdeps.ordered=false")
            assert not rc["failed"] and not rn["failed"], (rc["failed"], rn["failed"])
            cold.append(c), noop.append(n), late.append(lt), second.append((s, rs["executed"]))
        c, n, lt = statistics.median(cold), statistics.median(noop), statistics.median(late)
        print(f"cold                {c:6.2f} s   ({rc['executed']} steps, {rc['executor']})")
        print(f"no-op rebuild       {n:6.2f} s   {100 * n / c:5.1f} % of cold [< 3 %]   ({rn['executed']} steps run)")
        print(f"last pass changed   {lt:6.2f} s   {100 * lt / c:5.1f} % of cold [< 30 %]  "
              f"(--set build_fdeps.ordered=false: {rl['executed']} steps run)")
        print(f"second -o, same cache: {statistics.median(s for s, _ in second):.2f} s, "
              f"{max(e for _, e in second)} passes run [0]")

        # 4 ----------------------------------------------------------------------------------------
        print("\n== store bytes / BIR-JSON bytes ==")
        from tusk.cache import Store

        ratios = []
        for cache in (work / "cache-inc", work / "cache-2 workers"):
            store = Store(cache)
            for h in store.object_hashes():
                module = store.load(h)
                js = len(bir_json.dumps(module).encode())
                ratios.append((store.fs.tree_size(store.object_path(h)) / js, module.n_insts()))
        big = [r for r, n in ratios if n >= 1000]
        print(f"{len(ratios)} objects: median {statistics.median(r for r, _ in ratios):.3f} over all; "
              + (f"median {statistics.median(big):.4f} over the {len(big)} of >= 1000 instructions"
                 if big else "none of >= 1000 instructions"))
        print(f"(load average at the end: {os.getloadavg()[0]:.1f})")
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
