"""Run one entry: ``tusk trace`` it as its author would (the command line, the upstream file unchanged), then
translate the KLR, run the default pipeline, and compare the interpreter's outputs with the entry's reference.

Outputs start as NaN so that elements the kernel never writes are caught; the interpreter runs strict (a read
of a byte nothing wrote fails)."""

from __future__ import annotations

import ast
import inspect
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from .entry import Entry
from .refs import FP8_INFINITE_FROM, fp8_round

TRACE_TIMEOUT = 300
FP8_BIR = {"float8e3": "float8e3", "float8e4": "float8e4", "float8e5": "float8e5", "float8_e4m3": "float8e4",
           "float8_e4m3fn": "float8_e4m3fn"}  # KLR fp8 dtype -> the BIR dtype the interpreter decodes
EXPECTED_REFUSAL = "expected refusal"  # Entry.note prefix: the kernel is wrong on purpose; refusing it is right


def locate(path: str, repos: Path, work: Path) -> Path:
    """An entry's file. ``OWNER+NAME@REV/...`` names the file at commit REV of the user's clone OWNER+NAME
    (kernels upstream has since removed): that tree is extracted once, with ``git archive``, under WORK."""
    head, _, rest = path.partition("/")
    clone, at, rev = head.partition("@")
    if not at:
        return repos / path
    tree = work / "_revisions" / head
    if not tree.is_dir() and (repos / clone / ".git").exists():
        part = work / "_revisions" / f"{head}.part{os.getpid()}"
        part.mkdir(parents=True, exist_ok=True)
        tar = subprocess.run(["git", "-C", str(repos / clone), "archive", rev], capture_output=True)
        if tar.returncode == 0:
            subprocess.run(["tar", "-x", "-C", str(part)], input=tar.stdout, check=True)
            try:
                part.rename(tree)
            except OSError:        # another entry extracted it first
                shutil.rmtree(part, ignore_errors=True)
    return tree / rest


def tusk_command() -> list[str]:
    exe = Path(sys.executable).with_name("tusk")
    return [str(exe)] if exe.exists() else [shutil.which("tusk") or "tusk"]


def trace(entry: Entry, file: Path, repos: Path, out: Path) -> tuple[bool, str, float]:
    cmd = [*tusk_command(), "trace", f"{file}" + (f"::{entry.function}" if entry.function else "")]
    for spec in entry.inputs:
        cmd += ["--input", spec]
    for arg in entry.args:
        cmd += ["--arg", arg]
    if entry.grid:
        cmd += ["--grid", entry.grid]
    for extra in entry.options.get("path", ()):
        cmd += ["--path", str(repos / extra)]
    if "nki_api" in entry.options:
        cmd += ["--nki-api", str(entry.options["nki_api"])]
    cmd += ["-o", str(out), "--name", entry.name]
    t0 = time.perf_counter()
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=TRACE_TIMEOUT,
                              cwd=out.parent, env={**os.environ, "PYTHONHASHSEED": "0"})
    except subprocess.TimeoutExpired:
        return False, f"trace timed out after {TRACE_TIMEOUT} s", time.perf_counter() - t0
    took = time.perf_counter() - t0
    if done.returncode != 0 or not out.exists():
        lines = [ln for ln in done.stderr.splitlines() if ln.strip()]
        return False, " | ".join(lines[-3:]) or f"exit {done.returncode}", took
    return True, "", took


def inputs_for(entry: Entry, specs, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    arrays = []
    for i, spec in enumerate(specs):
        lo, hi = entry.range_of(i)
        if i in entry.ints:
            x = rng.integers(int(lo), int(hi), size=spec.shape).astype(np.float32)
        else:
            x = rng.uniform(lo, hi, size=spec.shape).astype(np.float32)
        if spec.dtype == "bfloat16":
            x = (x.view(np.uint32) + 0x7FFF + ((x.view(np.uint32) >> 16) & 1)) & 0xFFFF0000
            x = x.astype(np.uint32).view(np.float32)
        elif spec.dtype == "float16":
            x = x.astype(np.float16).astype(np.float32)
        elif spec.dtype in FP8_INFINITE_FROM:  # the interpreter rounds float inputs so: the reference sees them
            x = fp8_round(x, spec.dtype).astype(np.float32)
        arrays.append(x)
    return arrays


def compile_and_run(klr_path: Path, art: Path, inputs: dict[str, np.ndarray], out_shapes: dict[str, tuple],
                    ncores: int, pipeline: bool, strict: bool = True, fp8_outputs: dict[str, str] | None = None
                    ) -> dict[str, np.ndarray]:
    """``strict=False``: memory starts as random bytes instead, and reads of bytes nothing wrote are allowed
    (a kernel that computes garbage into elements it never lets reach the compared outputs).  ``fp8_outputs``:
    output name -> BIR fp8 dtype, whose codes are decoded to their values (the NaN sentinel is a NaN code)."""
    from tusk import stages
    from tusk.ir.verify import verify
    from tusk.sim.interp import decode, run
    from tusk.stages.host import host_module_for
    from tusk.workflows.pipeline import DEFAULT_ORDER

    order = DEFAULT_ORDER if pipeline else DEFAULT_ORDER[:1]
    got: dict[str, np.ndarray] = {n: np.full(s, np.nan, np.float32) for n, s in out_shapes.items()}
    for core in range(ncores):
        module = host_module_for(str(klr_path), core, str(art / str(core)))
        for step in order:
            module, _ = stages.make_pass(step).run(module)
        verify(module)
        # an argument written in place starts as the caller's values
        sentinel = {n: np.full(s, np.nan, np.float32) for n, s in out_shapes.items() if n not in inputs}
        res = run(module, {**inputs, **sentinel}, strict=strict, seed=None if strict else 12345)
        res = {n: decode(r, fp8_outputs[n]) if n in (fp8_outputs or {}) else r for n, r in res.items()}
        for n in out_shapes:
            written = ~np.isnan(res[n])
            got[n][written] = res[n][written]
    return got


def tensor_parameters(entry: Entry, file: Path) -> list[str]:
    """The kernel function's parameters that the entry's tensors fill: those not given by --arg, in order."""
    named = {a.split("=", 1)[0] for a in entry.args}
    try:
        tree = ast.parse(file.read_text())
    except (OSError, SyntaxError, ValueError):
        return []
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name == entry.function:
            params = [a.arg for a in [*node.args.posonlyargs, *node.args.args]]
            return [p for p in params if p not in named][:len(entry.inputs)]
    return []


def kernel_inputs(entry: Entry, file: Path, in_names: list[str], arrays: list[np.ndarray]):
    """The arrays of the KLR kernel's inputs. A kernel that writes into output arguments has fewer inputs
    than the entry has tensors: those are matched by parameter name."""
    if len(in_names) == len(arrays):
        return dict(zip(in_names, arrays, strict=True))
    by_name = dict(zip(tensor_parameters(entry, file), arrays, strict=False))
    if all(n in by_name for n in in_names):
        return {n: by_name[n] for n in in_names}
    return None


def run_entry(entry: Entry, repos: Path, work: Path, pipeline: bool = True) -> dict:
    from tusk.frontend import parse_tensor_spec
    from tusk.ir import klr

    work.mkdir(parents=True, exist_ok=True)
    klr_path = work / f"{entry.name}.klr"
    klr_path.unlink(missing_ok=True)
    result: dict = {"name": entry.name, "group": entry.group}
    file = locate(entry.path, repos, work)
    if not file.is_file():
        return {**result, "status": "missing", "detail": f"{entry.path} is not in {repos}"}
    ok, detail, took = trace(entry, file, repos, klr_path)
    result["trace_s"] = round(took, 2)
    if not ok:
        # an entry whose note says the upstream kernel is an error on purpose (a docs example of a refusal)
        expected = entry.note.startswith(EXPECTED_REFUSAL)
        return {**result, "status": "expected-refusal" if expected else "refused", "detail": detail}
    kernel = klr.read_klr(klr_path.read_bytes()).contents.kernel
    specs = [parse_tensor_spec(s) for s in entry.inputs]
    in_names = [t.name for t in kernel.inputs]
    arrays = inputs_for(entry, specs, seed=sum(map(ord, entry.name)))
    fed = kernel_inputs(entry, file, in_names, arrays)
    if fed is None:
        return {**result, "status": "error", "detail": f"the kernel has inputs {in_names}, the entry {len(specs)}"}
    out_shapes = {t.name: (int(t.shape.parDim), *map(int, t.shape.freeDims)) for t in kernel.outputs}
    fp8_outputs = {t.name: FP8_BIR[t.dtype.name] for t in kernel.outputs if t.dtype.name in FP8_BIR}
    t0 = time.perf_counter()
    try:
        got = compile_and_run(klr_path, work / entry.name, fed, out_shapes,
                              max(1, len(kernel.bodies)), pipeline, strict=entry.options.get("strict", True),
                              fp8_outputs=fp8_outputs)
    except Exception as e:  # noqa: BLE001 - the bench reports every failure by kind
        return {**result, "status": "compile-failed", "detail": f"{type(e).__name__}: {e}"[:400]}
    result["run_s"] = round(time.perf_counter() - t0, 2)
    if entry.reference is None:
        return {**result, "status": "no-reference", "detail": entry.note}
    names = list(out_shapes)
    args = dict(a.split("=", 1) for a in entry.args)
    if len(inspect.signature(entry.reference).parameters) >= 3:
        # a kernel that draws random numbers on the device: its reference checks the outputs against each
        # other (what the random draws decided is taken from them, everything else is recomputed)
        want = entry.reference(arrays, args, [got[n] for n in names])
    else:
        want = entry.reference(arrays, args)
    want = [want] if isinstance(want, np.ndarray) else list(want)
    if len(want) != len(names):
        return {**result, "status": "error", "detail": f"the kernel has outputs {names}, the reference {len(want)}"}
    worst = 0.0
    for n, w in zip(names, want, strict=True):
        g = got[n]
        w = np.asarray(w, np.float32)
        if g.size != w.size:
            return {**result, "status": "mismatch", "detail": f"{n}: shape {g.shape}, reference {w.shape}"}
        g = g.reshape(w.shape)
        unwritten = int(np.isnan(g).sum() - np.isnan(w).sum())
        if unwritten > 0 and not entry.partial:
            return {**result, "status": "partial", "detail": f"{n}: {unwritten} of {g.size} elements never written"}
        mask = ~np.isnan(g) & ~np.isnan(w)
        err = np.where(g[mask] == w[mask], 0.0, np.abs(g[mask] - w[mask]))  # equal infinities: no error
        bad = err > entry.atol + entry.rtol * np.abs(w[mask])
        if bad.any():
            return {**result, "status": "mismatch",
                    "detail": f"{n}: {int(bad.sum())} of {g.size} differ, max error {float(err.max()):.3g}"}
        if err.size:
            worst = max(worst, float((err / (np.abs(w[mask]) + entry.atol)).max()))
    return {**result, "status": "matched", "detail": f"worst relative error {worst:.2g}"}
