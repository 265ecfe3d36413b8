"""Build-system benchmark: CPU and wall of whole `tusk compile` commands, every mode, with ratios.

    python bench/bench_build.py [--repeat 1] [--quick] [--keep DIR]

Every figure is one whole command (interpreter start-up included): wall
seconds and CPU seconds (user + sys of the command and every process it
started, from ``resource.getrusage(RUSAGE_CHILDREN)``; its system seconds and page faults beside), modes interleaved
within each repetition, medians over repetitions, the load average of the
shared machine beside each.  Printed, never asserted.  Targets (issue 21)
in brackets:

1. the 8 large_matmul variants (32k-54k instructions each, 345k in all),
   cold cache, ``--workers 0/1/2``: in-process CPU [<= 30 s]; ``--workers 2``
   against ``--workers 1`` [>= 1.7x] and against in-process [>= 1.5x];
2. ``examples/large_kernels/large_matmul.json`` (1,236,992 instructions)
   alone: 2 workers against 1 [>= 1.6x]; wall against the sum of its steps'
   own run time [<= 1.3x];
3. ``examples/kernels``: a no-op rebuild through the CLI [<= 0.3 s wall]
   and a second ``-o`` with the same cache [<= 10 % of cold].
4. (``--only 4``) large_matmul with 2 workers, schedule split ahead of
   build_fdeps against the same command with that turned off in the client.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
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
# (mt, kt, nt) of examples.bir_kernels.large_matmul: mt * nt * (3 kt + 2) instructions after unrolling
VARIANTS = ((8, 170, 8), (8, 170, 9), (9, 170, 9), (8, 170, 10), (10, 170, 10), (8, 200, 8), (9, 180, 10),
            (10, 180, 10))
QUICK_VARIANTS = ((2, 20, 2), (2, 20, 3))


def load() -> str:
    return f"load {os.getloadavg()[0]:.1f}"


def children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def children_sys_and_faults() -> tuple[float, int]:
    """System seconds and page faults of the finished children: on a VM, first touches of fresh memory are
    dear (~7 us a page here), and a second worker growing its own heap pays them again."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_stime, r.ru_minflt + r.ru_majflt


# The commands run with bytecode caching on, as an installed package has its .pyc files: a session that sets
# PYTHONDONTWRITEBYTECODE would otherwise recompile Tusk in the client and in every worker (~0.4 s each).
CHILD_ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def tusk(corpus: Path, out: Path, cache: Path, *extra: str, as_json: bool = True,
         code: str | None = None) -> tuple[float, float, dict]:
    """One whole `tusk compile` command through the installed entry point (or ``python -c code`` with the
    same arguments): (wall, CPU, its --json report)."""
    exe = Path(sys.executable).with_name("tusk")
    launcher = [sys.executable, "-c", code] if code else \
        [str(exe) if exe.exists() else sys.executable, *([] if exe.exists() else ["-m", "tusk"])]
    cmd = [*launcher, "compile", str(corpus), "-o", str(out), "--cache-dir", str(cache), "--progress", "off",
           *(["--json"] if as_json else []), *extra]
    cpu0, (sys0, faults0), t = children_cpu(), children_sys_and_faults(), time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=str(out.parent), check=False, env=CHILD_ENV)
    wall, cpu = time.perf_counter() - t, children_cpu() - cpu0
    sys1, faults1 = children_sys_and_faults()
    if proc.returncode != 0:
        raise SystemExit(f"tusk compile failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    rep = json.loads(proc.stdout) if as_json else {}
    rep["bench_usage"] = {"sys": sys1 - sys0, "faults": faults1 - faults0}
    return wall, cpu, rep


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


def trace_tasks(out: Path) -> list[dict]:
    """The tasks of OUT/build-trace.json (its complete events)."""
    try:
        trace = json.loads((out / "build-trace.json").read_text())
    except (OSError, ValueError):
        return []
    return [e for e in trace.get("traceEvents", []) if e.get("ph") == "X"]


def pass_run_with_parts(events: list[dict]) -> float:
    """Seconds the passes ran in every task of the build (steps, and a fanned-out pass's split, parts and
    merge), from the build trace's tasks: the --json report's per-step timing is the merge task's alone, so a
    pass moved into parts would leave that sum and make the build look slower against it."""
    return sum(float(e.get("args", {}).get("run_s") or 0.0) for e in events
               if e.get("args", {}).get("status") == "executed"
               and e.get("cat") not in ("write_bir_json", "timing") and not str(e.get("cat", "")).startswith("timing"))


# tasks of the chain that two workers run beside another step's parts: build_fdeps' merge and schedule's split
# (schedule splits ahead of build_fdeps, Pass.split_ahead)
BESIDE_PARTS = ("build_fdeps (merge)", "schedule (split)")


def parallel_seconds(events: list[dict]) -> float:
    """Seconds of the build's tasks that two workers can run side by side (the parts of a split step, the
    verifier's checks, the final write: in parts on two workers; the chain's tasks that run beside parts),
    from the build trace's tasks.  Taken from a one-worker build, everything else is the chain that runs one
    task after another on any number of workers: with ``T`` its wall, ``T / (T - parallel / 2)`` bounds what
    two workers can gain (Amdahl)."""
    return sum(float(e.get("dur") or 0.0) / 1e6 for e in events
               if " part " in str(e.get("name")) or e.get("cat") in ("verify", "write_bir_json")
               or str(e.get("name")).endswith(BESIDE_PARTS))


def timing_steps(report: dict) -> float:
    """Seconds of the timing steps that ran (makespans and engine timelines, on workers)."""
    return sum(float(t.get("seconds") or 0.0) for k in report["kernels"] for u in k.get("units", [])
               for t in u.get("timings", []) if t.get("status") == "executed")


def fresh(*dirs: Path) -> None:
    for d in dirs:
        shutil.rmtree(d, ignore_errors=True)


def compare(work: Path, corpus: Path, modes: dict[str, tuple[str, ...]], repeat: int,
            codes: dict[str, str] | None = None) -> dict[str, list]:
    """Cold builds of ``corpus`` in every mode, interleaved: mode -> [(wall, cpu, report, load), ...].

    Every run gets directories of its own, and all are removed after the last run.  Removing the previous
    run's directories right before a run made it pay for them: for about half a minute after thousands
    of files are deleted, ext4 scans the recently freed inodes whenever it allocates one (a cold store
    creates ~3,500), which cost 5-10 % of a large_matmul build.  The previous run's written pages are
    flushed before each run (``sync``) for the same reason."""
    runs: dict[str, list] = {m: [] for m in modes}
    made: list[Path] = []
    try:
        for r in range(repeat):
            for mode, extra in modes.items():
                out, cache = work / f"out-{mode}-{r}", work / f"cache-{mode}-{r}"
                fresh(out, cache)
                made += [out, cache]
                os.sync()
                before = load()
                wall, cpu, rep = tusk(corpus, out, cache, *extra, code=(codes or {}).get(mode))
                events = trace_tasks(out)
                runs[mode].append((wall, cpu, rep, f"{before} -> {load()}", pass_run_with_parts(events),
                                   parallel_seconds(events)))
    finally:
        fresh(*made)
    return runs


def med(runs: list, k: int) -> float:
    return statistics.median(r[k] for r in runs)


def describe(runs: list) -> str:
    wall, cpu = med(runs, 0), med(runs, 1)
    rep = min(runs, key=lambda r: abs(r[0] - wall))
    t = pass_time(rep[2])
    use = rep[2]["bench_usage"]
    return (f"wall {wall:7.2f} s  CPU {cpu:7.2f} s  (system {use['sys']:.2f} s, {use['faults'] / 1000:.0f}k page "
            f"faults; steps' own run {t['run']:.2f} s, with their parts "
            f"{rep[4]:.2f} s; fetch {t['fetch']:.2f}, "
            f"hash {t['hash']:.2f}, store {t['store']:.2f}, hand-over {t['handover']:.2f}; timing steps "
            f"{timing_steps(rep[2]):.2f} s; outside the build (start-up, report, shutdown) "
            f"{rep[0] - float(rep[2].get('seconds') or 0.0):.2f} s; {rep[2]['executed']} steps; "
            f"{rep[2]['executor']}; {rep[3]})")


MODES = {"in-process": ("--workers", "0"), "1 worker": ("--workers", "1"), "2 workers": ("--workers", "2")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeat", type=int, default=1, help="interleaved repetitions per figure (medians)")
    ap.add_argument("--quick", action="store_true", help="small kernels (a smoke test of the script)")
    ap.add_argument("--keep", type=Path, help="work in this directory and keep it")
    ap.add_argument("--skip-large", action="store_true", help="leave out the 1.2M-instruction kernel")
    ap.add_argument("--only", type=int, action="append", choices=(1, 2, 3, 4), help="run only this section")
    args = ap.parse_args()
    work = args.keep or Path(tempfile.mkdtemp(prefix="tusk-bench-build-"))
    work.mkdir(parents=True, exist_ok=True)
    sys.path.insert(0, str(ROOT))
    try:
        print(f"(machine: {os.cpu_count()} CPUs, {load()} at start)")
        wanted = set(args.only or (1, 2, 3)) - ({2, 4} if args.skip_large or args.quick else set())
        if 1 in wanted:
            section_eight(work, args)
        if 2 in wanted:
            section_large(work, args)
        if 3 in wanted:
            section_corpus(work, args)
        if 4 in wanted:
            section_split_ahead(work, args)
        print(f"({load()} at the end)")
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


def section_eight(work: Path, args) -> None:
    from tusk.examples.bir_kernels import large_matmul
    from tusk.ir import bir_json

    eight = work / "eight"
    fresh(eight)
    eight.mkdir()
    total = 0
    for mt, kt, nt in (QUICK_VARIANTS if args.quick else VARIANTS):
        m = large_matmul(mt, kt, nt)[0]
        bir_json.save(m, eight / f"matmul_{mt}x{kt}x{nt}.json")
        total += mt * nt * (3 * kt + 2)
    n = len(list(eight.iterdir()))
    print(f"\n== {n} large_matmul variants ({total:,} instructions after unroll), cold, {args.repeat} "
          f"interleaved run(s) ==")
    runs = compare(work, eight, MODES, args.repeat)
    for mode, r in runs.items():
        print(f"{mode:10s} {describe(r)}")
    (w0, c0), (w1, _), (w2, c2) = ((med(runs[m], 0), med(runs[m], 1)) for m in MODES)
    print(f"in-process CPU {c0:.2f} s [<= 30 s]; 2 workers' CPU {c2:.2f} s ({c2 / c0:.2f}x in-process)")
    print(f"wall: 2 workers vs 1 {w1 / w2:.2f}x [>= 1.7x]; vs in-process {w0 / w2:.2f}x [>= 1.5x]")


def section_large(work: Path, args) -> None:
    large = work / "large"
    fresh(large)
    large.mkdir()
    shutil.copy(LARGE, large / LARGE.name)
    print(f"\n== {LARGE.name} (1,236,992 instructions after unroll), cold, {args.repeat} interleaved "
          f"run(s) ==")
    runs = compare(work, large, {"1 worker": MODES["1 worker"], "2 workers": MODES["2 workers"],
                                 "in-process": MODES["in-process"]}, args.repeat)
    for mode, r in runs.items():
        print(f"{mode:10s} {describe(r)}")
    w1, w2 = med(runs["1 worker"], 0), med(runs["2 workers"], 0)
    steps = statistics.median(r[4] for r in runs["2 workers"])
    alone = statistics.median(pass_time(r[2])["run"] for r in runs["2 workers"])
    print(f"wall: 2 workers vs 1 {w1 / w2:.2f}x [>= 1.6x]; wall / steps' own run time (2 workers; split, parts "
          f"and merge) {w2 / steps:.2f}x [<= 1.3x] (against the run time the steps' records name, without "
          f"their parts: {w2 / alone:.2f}x)")
    par = statistics.median(r[5] for r in runs["1 worker"])
    print(f"Amdahl's bound from the 1-worker builds' traces: {par:.2f} s of {w1:.2f} s can run two at a time "
          f"(parts, checks, the final write), the rest runs in a chain: 2 workers can gain at most "
          f"{w1 / max(w1 - par / 2, 1e-9):.2f}x, if two processes ran as fast as one")
    slow = steps / max(statistics.median(r[4] for r in runs["1 worker"]), 1e-9)
    print(f"the steps ran {slow:.2f}x as long with 2 workers as with 1 (two processes at once share the memory "
          f"bandwidth and caches): with the parallel part that much slower, the bound is "
          f"{w1 / max(w1 - par + par / 2 * slow, 1e-9):.2f}x")


# the same command from the same entry, with schedule's split ahead of build_fdeps on (as shipped) or off
CLI_MAIN = "import sys; from tusk.workflows.cli import main; sys.argv[0] = 'tusk'; main()"
NO_SPLIT_AHEAD = "import tusk.workflows.graph as g; g.Build._ahead_on = lambda self: False; " + CLI_MAIN


def section_split_ahead(work: Path, args) -> None:
    """4. large_matmul with 2 workers, schedule split ahead of build_fdeps (Pass.split_ahead) against the
    same build with it turned off in the client, interleaved (not in the default run: --only 4)."""
    large = work / "large"
    fresh(large)
    large.mkdir()
    shutil.copy(LARGE, large / LARGE.name)
    print(f"\n== {LARGE.name}, --workers 2, split ahead on / off, cold, {args.repeat} interleaved run(s) ==")
    modes = {"ahead": MODES["2 workers"], "not ahead": MODES["2 workers"]}
    runs = compare(work, large, modes, args.repeat, codes={"ahead": CLI_MAIN, "not ahead": NO_SPLIT_AHEAD})
    for mode, r in runs.items():
        print(f"{mode:10s} {describe(r)}")
    on, off = med(runs["ahead"], 0), med(runs["not ahead"], 0)
    print(f"wall: split ahead {off / on:.2f}x as fast as without (CPU {med(runs['not ahead'], 1):.2f} s without, "
          f"{med(runs['ahead'], 1):.2f} s with)")


def section_corpus(work: Path, args) -> None:
    corpus = work / "corpus"
    fresh(corpus)
    shutil.copytree(EXAMPLES, corpus)
    print(f"\n== examples/kernels ({len([p for p in corpus.iterdir() if p.is_file()])} files), "
          f"{args.repeat} run(s), through the CLI ==")
    rows = []
    for _ in range(args.repeat):
        out, cache, second = work / "out-inc", work / "cache-inc", work / "out-second"
        fresh(out, cache, second)
        cold = tusk(corpus, out, cache, as_json=False), load()
        noop = tusk(corpus, out, cache, as_json=False), load()
        again = tusk(corpus, second, cache), load()
        rows.append((cold, noop, again))
    for name, k in (("cold", 0), ("no-op rebuild", 1), ("second -o, same cache", 2)):
        wall = statistics.median(r[k][0][0] for r in rows)
        cpu = statistics.median(r[k][0][1] for r in rows)
        cold_wall = statistics.median(r[0][0][0] for r in rows)
        cold_cpu = statistics.median(r[0][0][1] for r in rows)
        target = {1: " [<= 0.3 s wall]", 2: " [<= 10 % of cold]"}.get(k, "")
        print(f"{name:22s} wall {wall:6.2f} s ({100 * wall / cold_wall:5.1f} % of cold)  CPU {cpu:6.2f} s "
              f"({100 * cpu / cold_cpu:5.1f} %){target}  ({rows[-1][k][1]})")
    print(f"second -o: {rows[-1][2][0][2]['executed']} passes run [0]")


if __name__ == "__main__":
    main()
