"""Small immutable values that operands point at through a function's pool.

Clones of one instruction share these objects; only offsets and names differ
between clones, so they live in the operand columns instead.
"""

from __future__ import annotations

from dataclasses import dataclass

from tusk.ir.expr import QuasiAffine

Pattern = tuple[tuple[int, int], ...]  # ((step, num), ...) outermost first, at most 4 pairs


@dataclass(frozen=True)
class SymAddr:
    """The address of a symbolic access pattern.

    ``offset`` is the element offset into the memory location as an
    expression of loop indices (and, for dynamic loops, register values);
    ``block`` picks the block of a block tensor (None for ordinary tensors).
    """

    offset: QuasiAffine
    block: QuasiAffine | None = None


@dataclass(frozen=True)
class DynamicAPInfo:
    """The runtime part of a dynamic access (KLR scalar or vector offset).

    Runtime address = ``c + sum(coef * expr for expr, coef in aff_expr)``
    in elements, where each expr is an IndirectArgExpr (gather index) or an
    IntRuntimeValue (register).  ``actual_ap`` is the static pattern.
    """

    actual_ap: Pattern
    aff_expr: tuple[tuple[QuasiAffine, int], ...]
    c: int
    indirect_dim: int = 0
    indirect_dim_max_index: int = 0
    num_tensor_indirect_indices: int = -1
    tensor_indirect_arg_id: int = -1

    def to_json(self) -> dict:
        out: dict = {
            "actual_ap": [list(p) for p in self.actual_ap],
            "aff_expr": [{"offset_expr": e.to_json(), "coef": k} for e, k in self.aff_expr],
            "c": self.c,
            "indirect_dim": self.indirect_dim,
            "indirect_dim_max_index": self.indirect_dim_max_index,
        }
        if self.num_tensor_indirect_indices >= 0:
            out["num_tensor_indirect_indices"] = self.num_tensor_indirect_indices
        if self.tensor_indirect_arg_id >= 0:
            out["tensor_indirect_arg_id"] = self.tensor_indirect_arg_id
        return out


@dataclass(frozen=True)
class ImmValue:
    """An immediate operand's value; ``value`` is an int, a float or a tuple (imm_array)."""

    value: int | float | tuple

    def _key(self) -> tuple:
        # repr tells apart what == merges: 1 and 1.0, 0.0 and -0.0 (and makes nan equal to itself)
        v = self.value
        return (type(v).__name__, tuple(map(repr, v)) if isinstance(v, tuple) else repr(v))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ImmValue) and other._key() == self._key()

    def __hash__(self) -> int:
        return hash(self._key())
