"""Memory benchmark: the peak resident memory of whole `tusk compile` commands (issue 21).

    python bench/bench_memory.py [DIR] [--workers 0 1 2] [--variant MT,KT,NT] [--trace FILE] [--keep DIR]

Runs ``tusk compile DIR -o OUT --workers N --no-report --progress plain``
as a subprocess, once per ``--workers`` value, each with a fresh cache (a
cold build), and samples every 0.2 s the resident memory (``VmRSS`` of
``/proc/<pid>/status``) of the command's whole process tree -- the client,
and for a cluster the scheduler, the nannies and the workers, found by
walking ``/proc/*/stat`` parent links.  Prints, per run: the peak of the
summed RSS, the peak of the largest single process (and its role), wall and
CPU (user + sys of the command and everything it started, from
``RUSAGE_CHILDREN``), with the load average of the shared machine.  The
default DIR is ``examples/large_kernels`` (1,236,992 instructions);
``--variant MT,KT,NT`` builds ``examples.bir_kernels.large_matmul(MT, KT, NT)``
(``MT*NT*(3*KT+2)`` instructions) instead.  ``--trace FILE`` writes every
sample (time, role, pid, RSS) and the build's progress lines as JSON lines,
to see which step each process peaks in.  A sample can miss a peak shorter
than 0.2 s.  Printed, never asserted; target: 2 workers under 4 GB summed.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LARGE_DIR = ROOT / "examples" / "large_kernels"
PERIOD = 0.2


def tree(root: int) -> list[int]:
    """``root`` and every live descendant, by the parent links of ``/proc/*/stat``."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                stat = fh.read()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])  # the command name may hold spaces and brackets
        children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(children.get(pid, ()))
    return out


def rss_bytes(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0  # gone, or a zombie


def role(pid: int, root: int) -> str:
    """client, scheduler, nanny or worker (Dask's spawned children are told apart by their command line)."""
    if pid == root:
        return "client"
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            cmd = fh.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return "?"
    if "multiprocessing.forkserver" in cmd or "resource_tracker" in cmd:
        return "helper"
    return "spawned" if "spawn_main" in cmd else "child"


class Sampler(threading.Thread):
    """Samples the summed RSS of a process tree until stopped."""

    def __init__(self, root: int, trace):
        super().__init__(daemon=True)
        self.root, self.trace, self.t0 = root, trace, time.perf_counter()
        self.peak_sum, self.peak_one, self.peak_role, self.peak_at = 0, 0, "", 0.0
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            self.sample()
            self.stop.wait(PERIOD)

    def sample(self) -> None:
        now = round(time.perf_counter() - self.t0, 2)
        rows = [(pid, rss_bytes(pid)) for pid in tree(self.root)]
        total = sum(r for _, r in rows)
        if total > self.peak_sum:
            self.peak_sum, self.peak_at = total, now
        for pid, r in rows:
            if r > self.peak_one:
                self.peak_one, self.peak_role = r, f"{role(pid, self.root)} {pid}"
        if self.trace:
            self.trace.write(json.dumps({"t": now, "sum": total, "rss": {str(p): r for p, r in rows}}) + "\n")


def children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def build(corpus: Path, out: Path, cache: Path, workers: int, trace) -> dict:
    exe = Path(sys.executable).with_name("tusk")
    cmd = [str(exe) if exe.exists() else sys.executable, *([] if exe.exists() else ["-m", "tusk"]), "compile",
           str(corpus), "-o", str(out), "--cache-dir", str(cache), "--workers", str(workers), "--no-report",
           "--progress", "plain"]
    cpu0, t = children_cpu(), time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            cwd=str(out.parent))
    sampler = Sampler(proc.pid, trace)
    sampler.start()
    lines = []
    assert proc.stdout is not None
    for line in proc.stdout:  # the progress log, stamped on the sampler's clock
        lines.append(line.rstrip())
        if trace:
            trace.write(json.dumps({"t": round(time.perf_counter() - sampler.t0, 2), "log": line.rstrip()}) + "\n")
    rc = proc.wait()
    sampler.stop.set()
    sampler.join()
    wall, cpu = time.perf_counter() - t, children_cpu() - cpu0
    return {"rc": rc, "wall": wall, "cpu": cpu, "peak_sum": sampler.peak_sum, "peak_at": sampler.peak_at,
            "peak_one": sampler.peak_one, "peak_role": sampler.peak_role, "tail": lines[-15:]}


def variant_dir(work: Path, spec: str) -> Path:
    from tusk.examples.bir_kernels import large_matmul
    from tusk.ir import bir_json

    mt, kt, nt = (int(x) for x in spec.split(","))
    d = work / f"matmul_{mt}x{kt}x{nt}"
    d.mkdir()
    bir_json.save(large_matmul(mt, kt, nt)[0], d / f"matmul_{mt}x{kt}x{nt}.json")
    print(f"kernel large_matmul({mt}, {kt}, {nt}): {mt * nt * (3 * kt + 2):,} instructions after unroll")
    return d


def gb(n: int) -> str:
    return f"{n / 1e9:.2f} GB"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("corpus", nargs="?", type=Path, default=LARGE_DIR)
    ap.add_argument("--workers", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--variant", help="MT,KT,NT: build large_matmul(MT, KT, NT) instead of DIR")
    ap.add_argument("--trace", type=Path, help="write the samples and the progress log here (JSON lines)")
    ap.add_argument("--keep", type=Path, help="work directory to keep (default: a temporary one)")
    args = ap.parse_args()
    work = args.keep or Path(tempfile.mkdtemp(prefix="tusk-bench-mem-"))
    work.mkdir(parents=True, exist_ok=True)
    trace = open(args.trace, "w") if args.trace else None
    try:
        corpus = variant_dir(work, args.variant) if args.variant else args.corpus
        for n in args.workers:
            out, cache = work / f"out{n}", work / f"cache{n}"
            shutil.rmtree(out, ignore_errors=True)
            shutil.rmtree(cache, ignore_errors=True)
            if trace:
                trace.write(json.dumps({"run": f"--workers {n}"}) + "\n")
            r = build(corpus, out, cache, n, trace)
            status = "ok" if r["rc"] == 0 else f"FAILED rc={r['rc']}"
            print(f"--workers {n}: peak summed RSS {gb(r['peak_sum'])} (at {r['peak_at']:.1f} s), largest process "
                  f"{gb(r['peak_one'])} ({r['peak_role']}), wall {r['wall']:.1f} s, CPU {r['cpu']:.1f} s, "
                  f"{status}, load {os.getloadavg()[0]:.1f}", flush=True)
            if r["rc"] != 0:
                print("\n".join(r["tail"]))
            shutil.rmtree(cache, ignore_errors=True)
    finally:
        if trace:
            trace.close()
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
