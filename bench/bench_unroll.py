"""Unrolling, Tusk against MLIR, like for like.

    python bench/bench_unroll.py [--sizes 1e5,1e6] [--reps 3] [--big] [--prefaulted]

Both sides unroll the same nest (bench/nests.py): four operations per
innermost iteration with nine operands and results each side.  Printed:

1. **The unroll step alone.**  Tusk's ``unroll_function`` on the nest (in this
   process, CPU seconds) against MLIR's own pass time, the
   ``AffineLoopUnroll`` line of ``mlir-opt --mlir-timing`` (medians of ``--reps``).
2. **File to file.**  ``full_unroll IN.json -o OUT.json -unrollLevel 2``
   (load, FullUnroll with DCE and the 25M ceiling, write BIR-JSON) against
   ``mlir-opt-19 IN.mlir --affine-loop-unroll="unroll-full unroll-num-reps=3"
   -o OUT.mlir``, whole processes, run in turn A B A B ... (``--reps`` pairs,
   after one untimed warm-up of full_unroll that writes Tusk's bytecode, as an
   installed package has it); medians of wall and of CPU seconds (user + system
   of the command alone: a small launcher forks it and reports its ``wait4``
   usage, the same measure for both commands) and of peak RSS (the command's
   own high-water mark), and full_unroll / mlir-opt of the medians.  Output
   bytes per instruction, and MLIR's per useful op (its affine.apply per
   iteration is not counted as work).  Beside them, the floor under any
   Python full_unroll: ``python -c "import numpy"`` (one BLAS thread), in
   the same turns, as a share of mlir-opt's CPU.
3. **A numpy floor**: building every column Tusk builds for the unrolled
   module (instructions: 9 columns; operands: 9 columns, 2.25 per
   instruction) with numpy alone, against Tusk's unroll step.
4. **Bytes per instruction** of Tusk's result: column bytes, and the peak RSS
   of a child process that builds the nest and unrolls it, minus the same
   child's RSS before unrolling.
5. With ``--big``: the real command at 24,990,000 instructions (just under
   the 25M ceiling): ``full_unroll IN.json -o OUT.json -unrollLevel 2`` with
   DCE and the ceiling, wall seconds and peak RSS, nothing prefaulted.
   ``--prefaulted`` adds the same run in a child that first touches 6 GiB
   (on this VM the first touch of fresh memory costs about 1 ms per MB), as a
   separate figure.

Install MLIR with ``apt-get install -y mlir-19-tools``.  Targets (printed,
not asserted): ``full_unroll`` file to file, CPU, at most 0.7 of mlir-opt's at
1e5 and 0.4 at 1e6; the 25M command under 120 s and 8 GiB peak RSS.  The unroll
step alone is compared wall against wall (``--mlir-timing`` reports wall time).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))

from nests import OPS_PER_ITERATION, mlir_nest, shape_for, tusk_nest  # noqa: E402

from tusk.ir.module import INST_SCHEMA, OPERAND_SCHEMA, SCHEMAS, Module  # noqa: E402

BIG_SHAPE = (50, 50, 2499)  # 24,990,000 instructions: under FullUnroll's 24,999,999 ceiling
FULL_UNROLL = [sys.executable, "-m", "tusk.workflows.full_unroll_cli"]


def mlir_exe() -> str | None:
    return shutil.which("mlir-opt-19") or ("/usr/lib/llvm-19/bin/mlir-opt"
                                           if os.path.exists("/usr/lib/llvm-19/bin/mlir-opt") else None)


def child_env() -> dict[str, str]:
    """The children's environment: bytecode caching on (an installed package has its .pyc files; a
    session that sets PYTHONDONTWRITEBYTECODE would otherwise recompile Tusk at every start)."""
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


# Runs a command for timed_process and prints its wall, CPU and peak RSS as JSON.  A child of this
# (large) bench process would report the bench's own resident memory as its peak: Linux carries the
# memory of the process that forked it into the child's high-water mark at exec (a 500 MB parent ->
# /bin/true "peaks" at 527 MiB), so the command is forked from this small launcher instead.
_LAUNCHER = """import json, os, sys, time
t0 = time.perf_counter()
pid = os.fork()
if pid == 0:
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
        os.execvp(sys.argv[1], sys.argv[1:])
    finally:
        os._exit(127)
_, status, ru = os.wait4(pid, 0)
print(json.dumps({"wall": time.perf_counter() - t0, "cpu": ru.ru_utime + ru.ru_stime,
                  "rss": ru.ru_maxrss * 1024, "code": os.waitstatus_to_exitcode(status)}))
"""


def timed_process(cmd: list[str]) -> dict:
    """Run ``cmd``: wall seconds, CPU seconds (user + system of the command alone, from wait4, the same
    measure for every command) and peak RSS bytes (the command's own high-water mark: see _LAUNCHER)."""
    with tempfile.TemporaryFile("w+") as err:
        proc = subprocess.run([sys.executable, "-S", "-c", _LAUNCHER, *cmd], stdout=subprocess.PIPE, stderr=err,
                              env=child_env(), text=True)
        err.seek(0)
        stderr = err.read()
    try:
        got = json.loads(proc.stdout)
    except ValueError:
        raise RuntimeError(f"launching {cmd[0]} failed:\n{stderr[-2000:]}") from None
    if got["code"] != 0:
        raise RuntimeError(f"{cmd[0]} failed:\n{stderr[-2000:]}")
    return {"wall": got["wall"], "cpu": got["cpu"], "rss": got["rss"], "stderr": stderr}


# ---------------------------------------------------------------- 1. the unroll step alone


def tusk_unroll_step(shape) -> tuple[float, float, Module]:
    """(CPU seconds, wall seconds, the unrolled module) of Tusk's unroll step in this process."""
    from tusk.stages.unroll import unroll_function

    m = tusk_nest(*shape)
    t0, w0 = time.process_time(), time.perf_counter()
    fn, _ = unroll_function(m.functions[0])
    return time.process_time() - t0, time.perf_counter() - w0, Module([fn], m.arch, m.version, m.attributes)


def mlir_pass_seconds(exe: str, src: str) -> float:
    proc = subprocess.run([exe, src, "--affine-loop-unroll=unroll-full unroll-num-reps=3", "-o", os.devnull,
                           "--mlir-timing"], capture_output=True, text=True)
    m = re.search(r"([0-9.]+) \(\s*[0-9.]+%\)\s+AffineLoopUnroll", proc.stderr)
    if proc.returncode != 0 or not m:
        raise RuntimeError(f"mlir-opt --mlir-timing gave no AffineLoopUnroll line:\n{proc.stderr[-1500:]}")
    return float(m.group(1))


# ---------------------------------------------------------------- 3. the numpy floor


def floor_seconds(shape) -> float:
    """Every column of the unrolled nest (instructions and operands, Tusk's dtypes), numpy only."""
    mt, nt, kt = shape
    t0 = time.process_time()
    it = mt * nt * kt
    n = OPS_PER_ITERATION * it
    mi, ni, ki = (a.ravel() for a in np.meshgrid(np.arange(mt), np.arange(nt), np.arange(kt), indexing="ij"))
    ins = {c: np.empty(n, dt) for c, dt in INST_SCHEMA}
    ins["opcode"][:] = np.tile(np.array([32, 32, 8, 32], np.uint8), it)
    ins["engine"][:] = np.tile(np.array([4, 4, 3, 4], np.uint8), it)
    ins["block"][:] = 0
    ins["name"][:] = np.tile(np.arange(4, dtype=np.int32), it)
    ins["iter"][:] = np.repeat(np.arange(it, dtype=np.int32), 4)
    ins["attrs"][:] = np.tile(np.array([0, 0, 1, 0], np.int32), it)
    ins["attrs"][2::4] += ki.astype(np.int32)          # one folded accumulation_flag record per ki
    nops = np.tile(np.array([2, 2, 3, 2], np.uint16), it)
    ins["nops"][:] = nops
    ins["ops"][:] = np.cumsum(nops, dtype=np.int64) - nops
    ins["pred"][:] = -1
    m_ops = int(nops.sum(dtype=np.int64))
    ops = {c: np.empty(m_ops, dt) for c, dt in OPERAND_SCHEMA}
    per = np.array([0, 2, 0, 2, 0, 0, 2, 0, 2], np.uint8)      # roles of the 9 operands of one iteration
    ops["role"][:] = np.tile(per, it)
    ops["kind"][:] = 1
    ops["dtype"][:] = 16
    ops["memloc"][:] = np.tile(np.array([0, 3, 1, 4, 3, 4, 5, 5, 2], np.int32), it)
    off = np.zeros((it, 9), np.int64)
    off[:, 0] = ki * 128 * (mt * 128) + mi * 128
    off[:, 2] = ki * 128 * (nt * 128) + ni * 128
    off[:, 8] = mi * 128 * (nt * 128) + ni * 128
    ops["offset"][:] = off.ravel()
    ops["pattern"][:] = np.tile(np.array([0, 1, 2, 1, 1, 1, 1, 1, 3], np.int32), it)
    for c in ("aux", "dyn", "extra"):
        ops[c][:] = -1
    return time.process_time() - t0


# ---------------------------------------------------------------- 4. bytes per instruction


def _hwm() -> int:
    """This process's peak RSS in bytes (VmHWM: per address space, so not inherited from a parent the
    way getrusage's ru_maxrss is across fork and exec)."""
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _child_rss(shape) -> None:
    """(child) peak RSS before and after unrolling, printed as JSON."""
    from tusk.stages.unroll import unroll_function

    m = tusk_nest(*shape)
    before = _hwm()
    fn, _ = unroll_function(m.functions[0])
    after = _hwm()
    cols = sum(getattr(fn, t).nbytes() for t in SCHEMAS)
    print(json.dumps({"delta": after - before, "columns": cols, "insts": len(fn.insts)}))


def rss_per_inst(shape) -> dict:
    proc = subprocess.run([sys.executable, __file__, "--child-rss", ",".join(map(str, shape))],
                          capture_output=True, text=True, check=True)
    r = json.loads(proc.stdout.strip().splitlines()[-1])
    return {"peak_delta": r["delta"] / r["insts"], "columns": r["columns"] / r["insts"]}


# ---------------------------------------------------------------- 5. 25M through the real command


def _prefault_and_run(args: list[str]) -> None:
    """(child) touch 6 GiB, then run the full_unroll command in this process."""
    block = np.ones(6 * 2**30 // 8)
    del block
    from tusk.workflows.full_unroll_cli import main

    t0 = time.perf_counter()
    rc = main(args)
    print(json.dumps({"rc": rc, "seconds": time.perf_counter() - t0, "rss": _hwm()}))


def big(tmp: Path, prefaulted: bool) -> None:
    from tusk.ir import bir_json

    src, out = tmp / "big.json", tmp / "big.out.json"
    bir_json.save(tusk_nest(*BIG_SHAPE), src)
    n = OPS_PER_ITERATION * BIG_SHAPE[0] * BIG_SHAPE[1] * BIG_SHAPE[2]
    r = timed_process([*FULL_UNROLL, str(src), "-o", str(out), "-unrollLevel", "2", "-verbose", "20"])
    size = out.stat().st_size
    got = re.search(r"wrote .* \((\d+) instructions\)", r["stderr"])
    print(f"25M: full_unroll -o OUT.json -unrollLevel 2 (DCE and the 24,999,999 ceiling) on {n:,} instructions "
          f"({got.group(1) if got else '?'} written): {r['wall']:.1f} s wall, {r['cpu']:.1f} s CPU, peak RSS "
          f"{r['rss'] / 2**30:.2f} GiB, {size / n:.0f} B/inst ({size / 2**30:.2f} GiB)  "
          f"[targets: < 120 s, < 8 GiB]")
    out.unlink()
    if prefaulted:
        proc = subprocess.run([sys.executable, __file__, "--child-prefaulted", str(src), str(out)],
                              capture_output=True, text=True)
        p = json.loads(proc.stdout.strip().splitlines()[-1])
        print(f"25M, prefaulted 6 GiB first (separate figure): {p['seconds']:.1f} s in the command, peak RSS "
              f"{p['rss'] / 2**30:.2f} GiB (the prefault included)")
        if out.exists():
            out.unlink()


# ---------------------------------------------------------------- main


def _ratio(theirs: float, ours: float) -> str:
    return f"{theirs / ours:.2f}x faster" if ours <= theirs else f"{ours / theirs:.2f}x slower"


CPU_TARGETS = {100_000: 0.7, 1_000_000: 0.4}  # full_unroll CPU / mlir-opt CPU, file to file, at most


def one_size(n: int, reps: int, exe: str | None, tmp: Path) -> None:
    from tusk.ir import bir_json

    shape = shape_for(n)
    steps = [tusk_unroll_step(shape) for _ in range(reps)]
    unroll_cpu = statistics.median(c for c, _, _ in steps)
    unroll_wall = statistics.median(w for _, w, _ in steps)
    out = steps[-1][2]
    del steps
    count = out.n_insts()
    floor = floor_seconds(shape)
    cols = sum(getattr(f, t).nbytes() for f in out.functions for t in SCHEMAS) / count
    del out
    rss = rss_per_inst(shape)
    print(f"\n== {count:,} instructions (nest {shape[0]}x{shape[1]}x{shape[2]}, {OPS_PER_ITERATION} ops per iteration)")
    print(f"unroll step: Tusk {unroll_cpu:.3f} s CPU, {unroll_wall:.3f} s wall", end="")
    src_j, src_m = tmp / f"n{n}.json", tmp / f"n{n}.mlir"
    bir_json.save(tusk_nest(*shape), src_j)
    src_m.write_text(mlir_nest(*shape))
    if exe:
        mp = statistics.median(mlir_pass_seconds(exe, str(src_m)) for _ in range(reps))
        print(f"; MLIR AffineLoopUnroll {mp:.3f} s wall (its own --mlir-timing; medians of {reps}): Tusk "
              f"{_ratio(mp, unroll_wall)} (wall against wall)")
    else:
        print("; mlir-opt-19 not installed (apt-get install -y mlir-19-tools)")
    print(f"numpy floor building every column: {floor:.3f} s CPU; Tusk's unroll step is {unroll_cpu / floor:.1f}x the "
          f"floor")
    print(f"bytes per instruction: {cols:.0f} in the result's columns, {rss['peak_delta']:.0f} as peak RSS delta "
          f"of the unroll")
    if exe:
        file_to_file(n, count, reps, exe, tmp, src_j, src_m)


def file_to_file(n: int, count: int, reps: int, exe: str, tmp: Path, src_j: Path, src_m: Path) -> None:
    """The two commands in turn, CPU against CPU and wall against wall, and their output bytes."""
    out_j, out_m = tmp / "out.json", tmp / "out.mlir"
    tusk_cmd = [*FULL_UNROLL, str(src_j), "-o", str(out_j), "-unrollLevel", "2"]
    mlir_cmd = [exe, str(src_m), "--affine-loop-unroll=unroll-full unroll-num-reps=3", "-o", str(out_m)]
    # the floor under any Python full_unroll: the interpreter starting and importing numpy, with one BLAS
    # thread as full_unroll sets it
    floor_cmd = [sys.executable, "-c", "import os; os.environ.setdefault('OPENBLAS_NUM_THREADS', '1'); import numpy"]
    timed_process(tusk_cmd)  # a warm-up run (untimed): the bytecode of Tusk's modules is written once
    a_runs, b_runs, f_runs = [], [], []
    for _ in range(reps):
        a_runs.append(timed_process(tusk_cmd))
        b_runs.append(timed_process(mlir_cmd))
        f_runs.append(timed_process(floor_cmd))
    sj, sm = out_j.stat().st_size, out_m.stat().st_size
    applies = count // OPS_PER_ITERATION  # MLIR's unroller adds one affine.apply per iteration: not useful work
    for label, key in (("wall", "wall"), ("CPU", "cpu")):
        a = statistics.median(r[key] for r in a_runs)
        b = statistics.median(r[key] for r in b_runs)
        target = f"  [target <= {CPU_TARGETS[n]}]" if key == "cpu" and n in CPU_TARGETS else ""
        print(f"file to file, {label} s (median of {reps}, interleaved): full_unroll {a:.3f}, mlir-opt {b:.3f}: "
              f"full_unroll / mlir-opt {a / b:.2f}{target}")
    f, b = statistics.median(r["cpu"] for r in f_runs), statistics.median(r["cpu"] for r in b_runs)
    a = statistics.median(r["cpu"] for r in a_runs)
    print(f"floor, CPU s (median of {reps}, interleaved): python -c 'import numpy' {f:.3f} = {f / b:.2f} of "
          f"mlir-opt's; full_unroll above it {a - f:.3f} ({(a - f) / b:.2f} of mlir-opt's)")
    print(f"peak RSS: full_unroll {statistics.median(r['rss'] for r in a_runs) / 2**20:.0f} MiB, mlir-opt "
          f"{statistics.median(r['rss'] for r in b_runs) / 2**20:.0f} MiB; output {sj / count:.0f} B/inst "
          f"(BIR-JSON) vs {sm / count:.0f} B per useful op (MLIR: {count:,} ops; {sm / (count + applies):.0f} B/op "
          f"counting its {applies:,} affine.apply)")
    out_j.unlink()
    out_m.unlink()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="1e5,1e6")
    ap.add_argument("--reps", type=int, default=3, help="interleaved file-to-file pairs per size")
    ap.add_argument("--big", action="store_true", help="also the 24,990,000-instruction full_unroll command")
    ap.add_argument("--prefaulted", action="store_true", help="with --big: also a prefaulted figure")
    ap.add_argument("--child-rss", help=argparse.SUPPRESS)
    ap.add_argument("--child-prefaulted", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child_rss:
        _child_rss(tuple(int(x) for x in args.child_rss.split(",")))
        return
    if args.child_prefaulted:
        src, out = args.child_prefaulted
        _prefault_and_run([src, "-o", out, "-unrollLevel", "2"])
        return
    exe = mlir_exe()
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        for text in args.sizes.split(","):
            one_size(int(float(text)), args.reps, exe, tmp)
        if args.big:
            big(tmp, args.prefaulted)


if __name__ == "__main__":
    main()
