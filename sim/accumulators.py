"""The engines' reduce registers: what an accumulating instruction leaves and a read-accumulator reads.

NKI's ``activation_reduce`` (and ``activation``/``activate2`` with ``reduce_res``)
reduce the *computed* values of each partition, in float32, into registers
inside the engine (``reduce_regs``, one per compute lane); BIR spells that as
the instruction's ``acc`` (EngineAccumulationType) and ``reduce_op``, then an
``ActivationReadAccumulator`` (or ``DveReadAccumulator``) that writes the
registers to a [P, 1] tile.  The registers are hidden engine state, like the
random generators (``tusk.sim.ops_isa.EngineRng``): the dependence graph keeps
the users of one engine's registers in program order
(``tusk.stages.deps.engine_state_chains``).

Reducing the computed values, not the destination read back, matters where
the two differ: a destination whose access pattern has a 0 step (every
element onto one, the form nki-library's RMSNorm uses for the squares it
only sums) or a narrower dtype than float32.
"""

from __future__ import annotations

import numpy as np

from tusk.ir.enums import ENGINE_NAMES, IDLE_ACCUMULATION
from tusk.ir.errors import InputError, PassError
from tusk.sim.machine import Frame

F32 = np.float32
# EngineAccumulationType by name and number (docs/bir-json.md)
ZERO, ACCUMULATE, ZERO_ACCUMULATE = ("Zero", 1), ("Accumulate", 2), ("ZeroAccumulate", 3)
_REDUCE = {"add": np.add, "max": np.maximum, "min": np.minimum, "mult": np.multiply}


def _registers(fr: Frame) -> dict[str, np.ndarray]:
    return fr.m.__dict__.setdefault("engine_accumulators", {})  # machine state kept across calls of one run


def _engine(fr: Frame, i: int) -> str:
    return ENGINE_NAMES[int(fr.fn.insts["engine"][i])]


def accumulate(fr: Frame, i: int, values: np.ndarray, attrs: dict) -> None:
    """Reduce ``values`` (the instruction's computed float32 results, [P, ...]) into its engine's registers
    as its ``acc`` command says (Idle: leave them)."""
    cmd = attrs.get("acc", attrs.get("reduce_cmd", "Idle"))  # Exponential names it reduce_cmd
    if cmd in IDLE_ACCUMULATION:
        return
    regs = _registers(fr)
    engine = _engine(fr, i)
    if cmd in ZERO:
        regs[engine] = np.zeros(128, F32)
        return
    op = _REDUCE.get(str(attrs.get("reduce_op", "add")))
    if op is None:
        raise PassError(f"an accumulating reduce_op={attrs.get('reduce_op')!r} is not supported by the interpreter")
    v = np.asarray(values, dtype=F32)
    parts = v.shape[0] if v.ndim else 1
    row = op.reduce(v.reshape(parts, -1), axis=1).astype(F32)
    if cmd in ZERO_ACCUMULATE:
        regs[engine] = np.full(128, np.nan, F32)
        regs[engine][:parts] = row
    elif cmd in ACCUMULATE:
        old = regs.get(engine)
        if old is None:
            raise InputError(f"instruction {i} accumulates into the {engine} engine's reduce registers before "
                             "anything reset them")
        old[:parts] = op(old[:parts], row).astype(F32)
    else:  # AddAccumulate / LoadAccumulate start from a value BIR does not carry: the registers are unknown now
        regs.pop(engine, None)


def h_read_accumulator(fr: Frame, i: int) -> None:
    """``ActivationReadAccumulator`` / ``DveReadAccumulator``: the engine's reduce registers, one per partition,
    into the output column."""
    _, _, outs = fr.split(i)
    if len(outs) != 1:
        raise InputError(f"a read-accumulator has {len(outs)} outputs (one column)")
    regs = _registers(fr).get(_engine(fr, i))
    if regs is None:
        raise InputError(f"instruction {i} reads the {_engine(fr, i)} engine's reduce registers, which no "
                         "instruction before it set in a way the interpreter models (Zero, ZeroAccumulate, "
                         "then Accumulate)")
    acc = fr.access(outs[0])
    parts = acc.shape[0] if acc.shape else 1
    if acc.count != parts:
        raise InputError(f"a read-accumulator writes one value per partition, not a {list(acc.shape)} access")
    fr.store(outs[0], regs[:parts])
