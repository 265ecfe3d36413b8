"""Build-system benchmark: incremental rebuilds, parallel speed-up, store size.  Prints; asserts nothing.

    python bench/bench_build.py [--quick] [--keep DIR]

Figures (targets from issue 7 in brackets):

1. cold build, no-op rebuild and a rebuild after one late pass's option
   changed, on the corpus, as ratios to the cold build
   [no-op < 5 %, one late pass < 35 %];
2. cold build with 2 workers against 1 worker on 8+ independent kernels
   [>= 1.6x on a 2-core machine];
3. bytes an object takes in the store against the size of the module's
   BIR-JSON [< 1/10].

The corpus is ``examples/kernels`` plus generated BIR-JSON kernels (tiled
load/exp/store loops of growing trip counts, the double-buffering
candidates).  The pipeline is the default one; while
``translate_nki_ast_to_bir`` is not available, a stand-in that expands
BIR-JSON kernels (``tests.passes_for_tests:ExpandBirKernel``) takes its
place so that the unroll and dependence passes have real work.
Everything runs in-process through ``workflows.compile`` with local Dask
clusters; the CLI figures include interpreter start-up.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.programs import tiled_exp_module  # noqa: E402
from tusk.ir import bir_json  # noqa: E402

STAND_IN = "tests.passes_for_tests:ExpandBirKernel"


def make_corpus(d: Path, n: int, base_tiles: int) -> None:
    d.mkdir(parents=True, exist_ok=True)
    examples = ROOT / "examples" / "kernels"
    for p in sorted(examples.iterdir()) if examples.is_dir() else []:
        if p.is_file():
            shutil.copy(p, d / p.name)
    for k in range(n):
        bir_json.save(tiled_exp_module(tiles=base_tiles + k * base_tiles // 4, width=128), d / f"tiled{k}.json")


def make_corpus_only_tiled(d: Path, n: int, tiles: int) -> None:
    """``n`` kernels of equal size (so the figure measures the parallel machinery, not a long tail)."""
    for k in range(n):
        bir_json.save(tiled_exp_module(tiles=tiles, width=128 + k), d / f"tiled{k}.json")


def cluster_startup(workers: int) -> float:
    from tusk.workflows.graph import local_cluster_executor

    t = time.perf_counter()
    ex = local_cluster_executor(workers)
    dt = time.perf_counter() - t
    ex.close()
    return dt


def pipeline_file(d: Path) -> tuple[Path, list[str]]:
    """The default pipeline as TOML, with the stand-in for translate when that pass is missing."""
    from tusk import stages
    from tusk.workflows.pipeline import DEFAULT_ORDER

    lines, names = [], []
    for name in DEFAULT_ORDER:
        if name == "translate_nki_ast_to_bir" and name not in stages.available():
            name = STAND_IN
        lines += ["[[step]]", f'pass = "{name}"', ""]
        names.append(name)
    p = d / "pipeline.toml"
    p.write_text("\n".join(lines))
    return p, names


def late_set(pipe: Path) -> list[str]:
    """A --set that changes one option of the last pass that runs and has a bool or int option."""
    from tusk.workflows.pipeline import load_pipeline, resolve

    steps = resolve(load_pipeline(pipe)).steps
    for step in reversed(steps):
        for k, v in step.options.items():
            if isinstance(v, bool):
                return [f"{step.label}.{k}={'false' if v else 'true'}"]
            if isinstance(v, int):
                return [f"{step.label}.{k}={v + 1}"]
    return []


def run(corpus: Path, out: Path, cache: Path, pipe: Path, workers: int, sets=()) -> tuple[float, object]:
    from tusk.workflows.compile import CompileRequest, compile_directory

    t = time.perf_counter()
    res = compile_directory(CompileRequest(directory=corpus, out=out, workers=workers, cache_dir=str(cache),
                                           pipeline=pipe, sets=list(sets)))
    return time.perf_counter() - t, res


def graph_only(corpus: Path, out: Path, cache: Path, pipe: Path, workers: int, sets=()) -> tuple[float, object]:
    """The build graph alone (keys, records, passes, store), without writing BIR-JSON outputs."""
    from tusk.cache import Store
    from tusk.workflows import config
    from tusk.workflows.compile import _units
    from tusk.workflows.graph import build, local_cluster_executor
    from tusk.workflows.kernels import discover
    from tusk.workflows.pipeline import apply_sets, load_pipeline, resolve

    t = time.perf_counter()
    cfg = config.load({"cache_dir": str(cache)})
    store = Store(cache)
    steps = resolve(apply_sets(load_pipeline(pipe), list(sets))).steps
    kernels, _ = discover(corpus, store)
    units = [u for k in kernels if not k.error for u in _units(k, out.resolve(), None, cfg)]
    rep = build(units, steps, store, env=config.output_key(cfg), executor=lambda: local_cluster_executor(workers))
    return time.perf_counter() - t, rep


def cli(corpus: Path, out: Path, cache: Path, pipe: Path, workers: int) -> float:
    env = dict(os.environ, PYTHONPATH=str(ROOT), TUSK_CACHE_DIR=str(cache))
    t = time.perf_counter()
    subprocess.run([sys.executable, "-m", "tusk.workflows.cli", "compile", str(corpus), "-o", str(out), "--workers",
                    str(workers), "--pipeline", str(pipe), "--json"], env=env, cwd=str(ROOT),
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    return time.perf_counter() - t


def describe(res) -> str:
    rep = res.report
    return (f"{rep.n_executed} pass runs, {rep.n_cached} cached, "
            f"{'cluster' if rep.cluster_started else 'no cluster'}, {len(res.failed)} failed kernel(s)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="a smaller corpus")
    ap.add_argument("--kernels", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=2, help="runs per figure (the best is reported)")
    ap.add_argument("--keep", type=Path, help="work in this directory and keep it")
    args = ap.parse_args()
    base = 300 if args.quick else 1200
    work = args.keep or Path(tempfile.mkdtemp(prefix="tusk-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        corpus = work / "corpus"
        shutil.rmtree(corpus, ignore_errors=True)
        make_corpus(corpus, args.kernels, base)
        pipe, names = pipeline_file(work)
        from tusk.workflows.pipeline import load_pipeline, resolve

        resolved = resolve(load_pipeline(pipe))
        print(f"corpus: {len(list(corpus.iterdir()))} files in {corpus}")
        print("pipeline: " + " -> ".join(s.spec for s in resolved.steps))
        if resolved.unavailable:
            print("not available yet: " + ", ".join(label for label, _ in resolved.unavailable))
        if STAND_IN in names:
            print(f"(translate_nki_ast_to_bir is not available: {STAND_IN} stands in for it)")

        # 1. incremental rebuilds ------------------------------------------------------------
        print("\n== incremental rebuilds (2 workers) ==")
        cold = noop = late = None
        sets = late_set(pipe)
        for r in range(args.repeat):
            cache, out = work / f"cache-inc{r}", work / f"out-inc{r}"
            shutil.rmtree(cache, ignore_errors=True), shutil.rmtree(out, ignore_errors=True)
            c, rc = run(corpus, out, cache, pipe, 2)
            n, rn = run(corpus, out, cache, pipe, 2)
            l, rl = run(corpus, out, cache, pipe, 2, sets) if sets else (float("nan"), None)
            cold, noop = min(cold or c, c), min(noop or n, n)
            late = min(late or l, l) if sets else l
        print(f"cold build            {cold:7.2f} s   ({describe(rc)})")
        print(f"no-op rebuild         {noop:7.2f} s   {100 * noop / cold:6.1f} % of cold   [target < 5 %]   "
              f"({describe(rn)})")
        if sets:
            print(f"late pass changed     {late:7.2f} s   {100 * late / cold:6.1f} % of cold   [target < 35 %]  "
                  f"(--set {sets[0]}: {describe(rl)})")
        else:
            print("late pass changed: no pass with a bool/int option runs; not measured")
        gc_, _ = graph_only(corpus, work / "out-g", work / "cache-g", pipe, 2)
        gn, _ = graph_only(corpus, work / "out-g", work / "cache-g", pipe, 2)
        gl, _ = graph_only(corpus, work / "out-g", work / "cache-g", pipe, 2, sets) if sets else (float("nan"), 0)
        print(f"graph only (no BIR-JSON written): cold {gc_:.2f} s, no-op {gn:.3f} s = {100 * gn / gc_:.1f} %, "
              f"late pass changed {gl:.2f} s = {100 * gl / gc_:.1f} %")
        cache, out = work / "cache-cli", work / "out-cli"
        shutil.rmtree(cache, ignore_errors=True), shutil.rmtree(out, ignore_errors=True)
        cc = cli(corpus, out, cache, pipe, 2)
        cn = cli(corpus, out, cache, pipe, 2)
        print(f"CLI (with start-up)   cold {cc:.2f} s, no-op {cn:.2f} s = {100 * cn / cc:.1f} % of cold")

        # 2. parallel speed-up ---------------------------------------------------------------
        print(f"\n== 1 vs 2 workers, cold, {args.kernels} independent kernels of {3 * base} tiles each ==")
        par = work / "par"
        shutil.rmtree(par, ignore_errors=True)
        par.mkdir()
        make_corpus_only_tiled(par, args.kernels, 3 * base)
        best = {}
        for r in range(args.repeat):
            for w in (1, 2):
                cache, out = work / f"cache-w{w}-{r}", work / f"out-w{w}-{r}"
                shutil.rmtree(cache, ignore_errors=True), shutil.rmtree(out, ignore_errors=True)
                t, _ = run(par, out, cache, pipe, w)
                best[w] = min(best.get(w, t), t)
        start = {w: min(cluster_startup(w) for _ in range(2)) for w in (1, 2)}
        print(f"1 worker  {best[1]:7.2f} s\n2 workers {best[2]:7.2f} s   speed-up {best[1] / best[2]:.2f}x   "
              f"[target >= 1.6x]   (cluster start-up included)")
        print(f"cluster start-up alone: 1 worker {start[1]:.2f} s, 2 workers {start[2]:.2f} s; without it: "
              f"speed-up {(best[1] - start[1]) / (best[2] - start[2]):.2f}x")
        print(f"(machine load average while measuring: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs)")

        # 3. store size ----------------------------------------------------------------------
        print("\n== store size against BIR-JSON ==")
        from tusk.cache import Store

        store = Store(work / "cache-inc0")
        ratios = []
        for h in store.object_hashes():
            module = store.load(h)
            js = len(bir_json.dumps(module).encode())
            size = store.fs.tree_size(store.object_path(h))
            ratios.append((size / js, size, js, module.n_insts()))
        ratios.sort(key=lambda r: r[2])
        if ratios:
            med = statistics.median(r[0] for r in ratios)
            big = [r for r in ratios if r[3] >= 1000]
            print(f"{len(ratios)} objects: store/BIR-JSON median {med:.3f} (1/{1 / med:.0f}), "
                  f"min {ratios and min(r[0] for r in ratios):.3f}, max {max(r[0] for r in ratios):.3f}   "
                  f"[target < 0.1]")
            if big:
                print(f"modules of >= 1000 instructions ({len(big)}): median "
                      f"{statistics.median(r[0] for r in big):.3f}")
            for r in (ratios[0], ratios[len(ratios) // 2], ratios[-1]):
                print(f"  {r[3]:>8} insts: BIR-JSON {r[2]:>10,} B, store {r[1]:>9,} B, ratio {r[0]:.3f}")
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
