"""The interpreter: what a BIR program computes (the contract is docs/semantics.md).

    outs = run(module, inputs)                 # {output memloc name: array}
    inp = random_inputs(module, seed=0)
    assert same_outputs(run(before, inp), run(after, inp))

``run`` executes the entry function in program order on numpy memories
(SBUF and PSUM as partitions x bytes, DRAM by memory location) through
physical addresses, so two live buffers that overlap clobber each other.
Inputs and outputs are keyed by DRAM memory-location name and shaped like
their set's ``tensor_shape`` (a block tensor's memory locations flat).

Representation of the dtypes numpy lacks: bfloat16 inputs may be float
arrays (rounded to nearest even) or uint16 bit patterns; bfloat16 outputs are
float32 arrays (exact).  fp8 inputs may be float arrays (rounded to the
format, sim/minifloat.py) or uint8 codes; fp8 outputs are uint8 codes (decode
them with ``decode``).  Packed MX tensors are raw unsigned integers of their
byte size, in and out.

Module layout: :mod:`sim.memory` (storages, dtypes, addressing),
:mod:`sim.machine` (machine state, frames, operands), :mod:`sim.ops`
(per-opcode semantics), :mod:`sim.control` (program order, loops, branches,
calls).
"""

from __future__ import annotations

import math
import os
from typing import Mapping

import numpy as np

from tusk.ir.enums import DTYPE_NAMES, INPUT_KINDS, OUTPUT_KINDS, Mem, TensorKind
from tusk.ir.errors import InputError, UsageError
from tusk.ir.module import Function, Module
from tusk.sim.control import run_function
from tusk.sim.machine import Frame, Machine, memloc_elems
from tusk.sim.memory import (
    BF16,
    DT_CLASS,
    FLOAT,
    FP8,
    INT,
    NP_DTYPES,
    SMALL_BYTES,
    bf16_to_f32,
    f32_to_bf16,
    free_memory,
    from_compute,
)
from tusk.sim.minifloat import FORMATS

__all__ = ["run", "random_inputs", "same_outputs", "entry_function", "decode"]


def entry_function(module: Module, name: str | None = None) -> Function:
    """``name``, else the function called "main", else the first function."""
    if name is not None:
        return module.function(name)
    if not module.functions:
        raise InputError("module has no functions")
    for fn in module.functions:
        if fn.name == "main":
            return fn
    return module.functions[0]


def _dram_tensors(fn: Function, kinds) -> list[int]:
    ml = fn.memlocs
    set_kind = fn.sets["kind"]
    out = []
    for m, (s, mtype) in enumerate(zip(ml["set"].tolist(), ml["mtype"].tolist())):
        if mtype == Mem.DRAM and int(set_kind[s]) in kinds:
            out.append(m)
    return out


def _to_storage(value, dt: int, n: int, name: str) -> np.ndarray:
    arr = np.asarray(value)
    if arr.size != n:
        raise UsageError(f"input {name} has {arr.size} elements; its tensor has {n}")
    npdt = NP_DTYPES[dt]
    c = DT_CLASS[dt]
    if c == BF16:
        if arr.dtype == np.uint16:
            return arr.reshape(-1)
        return f32_to_bf16(arr.astype(np.float32).reshape(-1))
    if c in (FLOAT, INT):
        return arr.astype(npdt).reshape(-1)
    if c == FP8 and arr.dtype.kind == "f":  # values: rounded to the format (raw uint8 codes are taken as they are)
        return from_compute(arr.reshape(-1), dt)
    if arr.dtype.itemsize != npdt.itemsize or arr.dtype.kind not in "iu":
        raise UsageError(f"input {name} is {DTYPE_NAMES[dt]}: give its raw bytes as {npdt} (got {arr.dtype})")
    return arr.astype(npdt).reshape(-1)


def decode(raw: np.ndarray, dtype: str) -> np.ndarray:
    """An output's float32 values from its fp8 codes (``dtype``: the BIR dtype name, e.g. ``float8e4``)."""
    return FORMATS[dtype].decode(raw)


def _from_storage(raw: np.ndarray, dt: int, shape) -> np.ndarray:
    if DT_CLASS[dt] == BF16:
        return bf16_to_f32(raw).reshape(shape)
    return raw.reshape(shape)


def run(module: Module, inputs: Mapping[str, np.ndarray] | None = None, *, strict: bool = False,
        function: str | None = None, seed: int | None = None, max_steps: int = 20_000_000
        ) -> dict[str, np.ndarray]:
    """Execute ``module``'s entry function; return every output DRAM tensor by memory-location name.

    ``strict``: reading a byte never written (inputs count as written) raises
    a TuskError naming the instruction and memory location.  ``seed``: the
    memories start as deterministic random bytes instead of zeros, so a
    program that reads uninitialised memory shows it in its outputs.
    ``max_steps`` bounds the executed instructions (infinite loops).
    """
    inputs = dict(inputs or {})
    fn = entry_function(module, function)
    machine = Machine(module, strict=strict, seed=seed, max_steps=max_steps)
    frame = Frame(machine, fn)
    ml_names = [fn.strings[n] for n in fn.memlocs["name"].tolist()]
    by_name = {n: m for m, n in enumerate(ml_names)}
    mtype = fn.memlocs["mtype"]
    for name in inputs:
        m = by_name.get(name)
        if m is None or int(mtype[m]) != Mem.DRAM:
            raise UsageError(f"input {name!r} names no DRAM memory location of function {fn.name}")
    need = _dram_tensors(fn, INPUT_KINDS)
    missing = [ml_names[m] for m in need if ml_names[m] not in inputs]
    if missing:
        raise UsageError(f"function {fn.name}: missing input(s) {', '.join(missing)}")
    for m in _dram_tensors(fn, {TensorKind.Const}):
        if ml_names[m] not in inputs:
            inputs[ml_names[m]] = _const_file(module, fn, m, ml_names[m])
    for name, value in inputs.items():
        m = by_name[name]
        shape, dt = memloc_elems(fn, m)
        n = int(np.prod(shape, dtype=np.int64)) if shape else 1
        loc = frame.locs[m]
        loc.storage.put(loc.addr, _to_storage(value, dt, n, name))
    with np.errstate(all="ignore"):
        run_function(frame)
    outs: dict[str, np.ndarray] = {}
    for m in _dram_tensors(fn, OUTPUT_KINDS):
        shape, dt = memloc_elems(fn, m)
        n = int(np.prod(shape, dtype=np.int64)) if shape else 1
        loc = frame.locs[m]
        npdt = NP_DTYPES[dt]
        raw = loc.storage.get(loc.addr, n * npdt.itemsize).view(npdt)
        outs[ml_names[m]] = _from_storage(raw, dt, shape)
    return outs


def _const_file(module: Module, fn: Function, m: int, name: str) -> np.ndarray:
    """A Const tensor's contents from its .npy file (relative paths: against the artifact directory)."""
    path = fn.string(fn.memlocs.get("const_path", m))
    if path and path.endswith(".npy"):
        if not os.path.isabs(path) and module.artifact_dir and not os.path.exists(path):
            path = os.path.join(module.artifact_dir, path)
        try:
            return np.load(path, allow_pickle=False)
        except (OSError, ValueError) as e:
            raise InputError(f"const tensor {name}: cannot read {path}: {e}") from None
    raise UsageError(f"const tensor {name} has no value: pass it in inputs (or give a .npy const_file_path)")


def load_consts(frame: Frame, bound: set[int]) -> None:
    """Fill a called function's own Const DRAM tensors (those not bound to the caller) from their files."""
    fn = frame.fn
    for m in _dram_tensors(fn, {TensorKind.Const}):
        if m in bound:
            continue
        name = fn.strings[fn.memlocs.get("name", m)]
        shape, dt = memloc_elems(fn, m)
        n = int(np.prod(shape, dtype=np.int64)) if shape else 1
        loc = frame.locs[m]
        loc.storage.put(loc.addr, _to_storage(_const_file(frame.m.module, fn, m, name), dt, n, name))


def random_inputs(module: Module, seed: int = 0, *, function: str | None = None) -> dict[str, np.ndarray]:
    """Deterministic random values for every input (and const) DRAM tensor of the entry function.

    Floats are uniform in [-2, 2) (bfloat16 ones exactly representable),
    integers in [0, 8), fp8/fp4 tensors random raw bytes.
    """
    fn = entry_function(module, function)
    rng = np.random.default_rng(seed)
    out: dict[str, np.ndarray] = {}
    for m in _dram_tensors(fn, INPUT_KINDS | {TensorKind.Const}):
        name = fn.strings[fn.memlocs.get("name", m)]
        shape, dt = memloc_elems(fn, m)
        need = math.prod(shape) * 16  # drawn in float64, then cast: two arrays at once
        too_big = f"input {name} of shape {list(shape)} is more than this machine has free"
        if need > SMALL_BYTES and need > free_memory():
            raise InputError(too_big)
        try:
            out[name] = _random_values(rng, shape, dt)
        except MemoryError:  # free by /proc/meminfo, but not to this process (a ulimit, a cgroup)
            raise InputError(too_big) from None
    return out


def _random_values(rng: np.random.Generator, shape: tuple, dt: int) -> np.ndarray:
    c = DT_CLASS[dt]
    if c == FLOAT:
        return rng.uniform(-2.0, 2.0, size=shape).astype(NP_DTYPES[dt])
    if c == BF16:
        return bf16_to_f32(f32_to_bf16(rng.uniform(-2.0, 2.0, size=shape).astype(np.float32))).reshape(shape)
    if c == INT:
        return rng.integers(0, 8, size=shape).astype(NP_DTYPES[dt])
    info = np.iinfo(NP_DTYPES[dt])
    return rng.integers(0, int(info.max) + 1, size=shape, dtype=NP_DTYPES[dt])


def same_outputs(a: Mapping[str, np.ndarray], b: Mapping[str, np.ndarray]) -> bool:
    """Bit-for-bit equality of two output dicts (NaN-safe: compares raw bytes)."""
    if set(a) != set(b):
        return False
    for k in a:
        x, y = np.ascontiguousarray(a[k]), np.ascontiguousarray(b[k])
        if x.shape != y.shape or x.dtype != y.dtype:
            return False
        if not np.array_equal(x.view(np.uint8), y.view(np.uint8)):
            return False
    return True


