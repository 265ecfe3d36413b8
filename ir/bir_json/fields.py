"""The reader's typed field checks: every refusal a FormatError naming the JSON path.

Shared by the ordinary reader, the columnar loader (through it) and the store's decoding of pool
values (:mod:`tusk.ir.serial` reads a DynamicAPInfo with :func:`read_dyn_info`).
"""

from __future__ import annotations

import math
from typing import Any, Mapping

from tusk.ir import wire
from tusk.ir.columns import Record
from tusk.ir.enums import Dt
from tusk.ir.errors import FormatError
from tusk.ir.expr import QuasiAffine, expr_from_json
from tusk.ir.values import DynamicAPInfo
from tusk.ir.wire import WIRE

MAX_AP_DIMS = 4
MAX_DEPTH = 200  # nesting of unmodelled values; deeper documents are refused
I64_MIN, I64_MAX = -(1 << 63), (1 << 63) - 1
U64_MAX = (1 << 64) - 1
I32_MAX = (1 << 31) - 1


NONFINITE = {"inf": math.inf, "-inf": -math.inf, "nan": math.nan}


def format_error(msg: str, where: str) -> FormatError:
    return FormatError(msg, where=where)


def typename(x: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean", type(None): "null",
            int: "an integer", float: "a number"}.get(type(x), type(x).__name__)


def expect_obj(x: Any, where: str, what: str = "an object") -> dict:
    if type(x) is not dict:
        raise format_error(f"expected {what}, got {typename(x)}", where)
    return x


def expect_list(x: Any, where: str) -> list:
    if type(x) is not list:
        raise format_error(f"expected a list, got {typename(x)}", where)
    return x


def required(obj: dict, key: str, where: str) -> Any:
    if key not in obj:
        raise format_error(f"missing required key '{key}'", where)
    return obj[key]


def expect_str(x: Any, where: str) -> str:
    if type(x) is not str:
        raise format_error(f"expected a string, got {typename(x)}", where)
    return x


def expect_bool(x: Any, where: str) -> bool:
    if type(x) is not bool:
        raise format_error(f"expected true or false, got {typename(x)}", where)
    return x


def expect_int(x: Any, where: str, *, minimum: int | None = I64_MIN, maximum: int = I64_MAX) -> int:
    """An integer in [minimum, maximum] (an integral number like 4.0 counts)."""
    if type(x) is not int:
        if type(x) is float and math.isfinite(x) and x.is_integer() and abs(x) < 2.0 ** 62:
            x = int(x)
        else:
            raise format_error(f"expected an integer, got {typename(x)} {short(x)}", where)
    if minimum is not None and x < minimum:
        raise format_error(f"expected an integer >= {minimum}, got {short(x)}", where)
    if x > maximum:
        raise format_error(f"integer {short(x)} is out of range (at most {maximum})", where)
    return x


def short(x: Any) -> str:
    text = repr(x)
    return text if len(text) <= 40 else text[:37] + "..."


def expect_enum(x: Any, table: Mapping[str, int], what: str, where: str) -> int:
    if type(x) is str and x in table:
        return table[x]
    raise format_error(f"unknown {what} {short(x)}", where)


def read_pattern(x: Any, where: str) -> tuple[tuple[int, int], ...]:
    if type(x) is list and len(x) <= MAX_AP_DIMS:  # the fast path: every AP operand has one
        ok = True
        for p in x:
            if type(p) is not list or len(p) != 2 or type(p[0]) is not int or type(p[1]) is not int \
                    or not (I64_MIN <= p[0] <= I64_MAX and 0 <= p[1] <= I64_MAX):
                ok = False
                break
        if ok:
            return tuple((p[0], p[1]) for p in x)
    pairs = expect_list(x, where)
    if len(pairs) > MAX_AP_DIMS:
        raise format_error(f"access pattern has {len(pairs)} dimensions, at most {MAX_AP_DIMS} are allowed", where)
    out = []
    for k, pair in enumerate(pairs):
        w = f"{where}[{k}]"
        if type(pair) is not list or len(pair) != 2:
            raise format_error("an access-pattern pair must be [step, num]", w)
        out.append((expect_int(pair[0], w + "[0]"), expect_int(pair[1], w + "[1]", minimum=0)))
    return tuple(out)


def imm_maximum(dtype: int) -> int:
    """The largest integer an immediate of ``dtype`` may spell: BIR writes uint64 immediates unsigned."""
    return U64_MAX if dtype == Dt.uint64 else I64_MAX


def read_number(x: Any, where: str, *, maximum: int = I64_MAX) -> int | float:
    """A number of an immediate; ``maximum`` is U64_MAX for a uint64 immediate (BIR writes those unsigned)."""
    if type(x) is str and x in NONFINITE:
        return NONFINITE[x]
    if type(x) is int:
        return expect_int(x, where, maximum=maximum)
    if type(x) is float:
        return x
    raise format_error(f"expected a number (or \"inf\", \"-inf\", \"nan\"), got {typename(x)}", where)


def read_expr(x: Any, where: str) -> QuasiAffine:
    check_depth(x, where)
    return expr_from_json(x, where)


def check_depth(x: Any, where: str, depth: int = 0) -> None:
    """Refuse unmodelled values nested deeper than MAX_DEPTH (checked without recursing past it) or holding
    integers outside [-2**63, 2**64) (what JSON writers, ours included, can spell exactly)."""
    t = type(x)
    if t is dict:
        vals = x.values()
    elif t is list:
        vals = x
    else:
        if t is int and not I64_MIN <= x < (1 << 64):
            raise format_error(f"integer {short(x)} is out of range", where)
        return
    if depth >= MAX_DEPTH:
        raise format_error(f"value nested deeper than {MAX_DEPTH} levels", where)
    for v in vals:
        tv = type(v)
        if tv is dict or tv is list:
            check_depth(v, where, depth + 1)
        elif tv is int and not I64_MIN <= v < (1 << 64):
            raise format_error(f"integer {short(v)} is out of range", where)


def frozen_record(d: dict, where: str) -> Record:
    for k, v in d.items():
        if k == WIRE:
            raise format_error(f"the key {WIRE!r} is reserved", where)
        check_depth(v, f"{where}.{k}")
    return Record.of(d)


def with_patch(rec: Mapping[str, Any] | None, patch: Mapping[str, tuple]) -> Record:
    for k, (raw, _) in patch.items():
        for v in raw:
            check_depth(v, k)
    return wire.with_patch(rec, patch)



def check_loop_axis(attrs: dict, where: str) -> None:
    key = "LoopAxis" if "LoopAxis" in attrs else "DynamicForLoopAxis"
    ax = expect_obj(required(attrs, key, where), f"{where}.{key}")
    expect_str(required(ax, "name", f"{where}.{key}"), f"{where}.{key}.name")
    for b in ("lb", "ub"):
        required(ax, b, f"{where}.{key}")
    for b in ("lb", "ub", "stride"):
        v = ax.get(b, 1)
        w = f"{where}.{key}.{b}"
        if type(v) is int or type(v) is float:
            expect_int(v, w, minimum=-(1 << 62), maximum=1 << 62)
        elif type(v) is dict:
            read_expr(v, w)
        elif type(v) is not str:
            raise format_error(f"loop bound '{b}' must be an integer, a register name or an expression", w)
        elif key == "LoopAxis":
            raise format_error(f"loop bound '{b}' of a static Loop must be an integer, got {short(v)}", w)
    if ax.get("stride", 1) == 0:
        raise format_error("loop stride must not be 0", f"{where}.{key}.stride")


def read_dyn_info(obj: Any, where: str) -> DynamicAPInfo:
    d = expect_obj(obj, where)
    terms = []
    for k, t in enumerate(expect_list(d.get("aff_expr", []), where + ".aff_expr")):
        w = f"{where}.aff_expr[{k}]"
        t = expect_obj(t, w)
        terms.append((read_expr(required(t, "offset_expr", w), w + ".offset_expr"), expect_int(required(t, "coef", w), w + ".coef")))
    return DynamicAPInfo(
        actual_ap=read_pattern(d.get("actual_ap", []), where + ".actual_ap"),
        aff_expr=tuple(terms),
        c=expect_int(d.get("c", 0), where + ".c"),
        indirect_dim=expect_int(d.get("indirect_dim", 0), where + ".indirect_dim", minimum=0, maximum=I32_MAX),
        indirect_dim_max_index=expect_int(d.get("indirect_dim_max_index", 0), where + ".indirect_dim_max_index",
                                    minimum=0),
        num_tensor_indirect_indices=expect_int(d.get("num_tensor_indirect_indices", -1),
                                         where + ".num_tensor_indirect_indices", minimum=-1),
        tensor_indirect_arg_id=expect_int(d.get("tensor_indirect_arg_id", -1), where + ".tensor_indirect_arg_id",
                                    minimum=-1),
    )

