"""The dynamic access-pattern slice of KLR -> BIR codegen (seed 003).

A KLR ``BirAccessPattern`` is *dynamic* when it carries a runtime offset:
either a scalar offset (a register named by ``ScalarOffset.reg``, or a
one-element tensor read through ``ScalarOffset.acc``) or a vector offset (an
index tensor: a gather / scatter on the partition axis).  The two are
mutually exclusive.  This module reimplements, function by function:

* ``isAccessDynamic`` for BirAccessPattern, Access and TensorRef
  (:func:`is_access_dynamic`) and the XOR validator
  (:func:`validate_only_one_of_scalar_and_vector_offset`);
* ``castToBirAp`` (:func:`cast_to_bir_ap`);
* ``_computeAccumulatedShape`` (:func:`compute_accumulated_shape`);
* ``assembleDynamicInfo`` (:func:`assemble_dynamic_info`): the
  :class:`~ir.values.DynamicAPInfo` companion of the static operand;
* ``extractDynamicApToStandAlone`` (:func:`extract_dynamic_ap_to_standalone`):
  the gather-index hoist (a standalone operand, and the access with its
  vector-offset flag cleared).

The functions take the codegen object ``cg`` for the two services they need
from it: ``cg.static_access(access)`` (the leaf encoder, seed
``codegenAccess``; returns a :class:`StaticArg`) and ``cg.fn`` (the function
being built, for ``getRegisterByName``).

Coefficient convention (decided here, see docs/translate.md): KLR's ``Shape``
keeps ``parDim`` apart from the ``freeDims`` list, and the seed's loop walks
the intrusive *list* at ``Shape+0x08`` -- which is ``freeDims``.  So
``_computeAccumulatedShape(shape, dim) = prod(freeDims[dim:])``, the
row-major element stride of axis ``dim`` of the full shape
``[parDim] + freeDims`` (for the front end's ``indirectDim = 0``: the row
stride, so a register offset counts partition rows).  That stride is in
elements of the tensor's dtype; the operand's pattern counts elements of its
own dtype (``dtypeOverride``), so the coefficient is rescaled to those.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from tusk.ir.enums import DTYPE_SIZES
from tusk.ir.errors import PassError
from tusk.ir.expr import QuasiAffine, indirect, runtime
from tusk.ir.klr import types as T
from tusk.ir.values import DynamicAPInfo, Pattern

#: The seed's per-dtype byte table (``qword_1DE98C0``), indexed by BIR dtype ordinal.
DTYPE_BYTES: tuple[int, ...] = (1, 1, 2, 1, 1, 1, 1, 1, 4, 4, 2, 2, 2, 2, 4, 4, 4, 4, 8, 8)
assert DTYPE_BYTES == DTYPE_SIZES[:len(DTYPE_BYTES)]  # Tusk-only dtypes (bool) follow

#: The gather index / scalar-acc tensor is always the instruction's first indirection operand.
INDIRECT_ARG_ID = 1

MSG_CAST = "Logic fault: Attempt to cast a TensorRef that is not an BirAP"
MSG_XOR = ("Logic fault: a dynamic access must carry exactly one of a scalar offset and a vector offset "
           "(_validateOnlyOneOfScalarAndVectorDynamicOffsetIsProvided)")
MSG_NEVER = "Logic fault, this branch should never be taken"
MSG_VECTOR_DIM = "When using vector offset, the only supported indirectDim is 0"
MSG_NO_REGISTER = "Cannot find register: {name} for scalar offset"
MSG_EXTRACT_STATIC = "Compiler Logic Fault: cannot extract dynamic ap from a static access!"
MSG_EXTRACT_SCALAR = ("When unique_indices=True, it's expected that the vector_offset is set. "
                      "Check the nisa.dma_copy call")
MSG_EXTRACT_NO_VECTOR = "Logic Fault: dynamic access should have vector offset."


@dataclass(frozen=True)
class StaticArg:
    """The static part of an operand (seed: the kind-1 InstArg codegenAccess mints).

    ``offset`` and ``pattern`` are physical (BIR element units of ``dtype``,
    pitch form for SB/PSUM).  ``nparts``/``nbytes`` describe the memory
    location; ``partitioned`` is true for SB/PSUM.
    """

    memloc: int
    dtype: int
    offset: int
    pattern: Pattern
    partitioned: bool
    nparts: int
    nbytes: int          # bytes per partition (SB/PSUM) or of the whole region (DRAM)
    pitch: int           # physical elements per partition row (SB/PSUM); 0 for DRAM
    logical_row: int     # elements per logical row of the KLR tensor (freeElements in this dtype)


# --------------------------------------------------------------------------- predicates


def _flags(bap: Any) -> tuple[bool, bool]:
    """The two presence flags as canonical booleans (the seed compares raw 0/1 bytes)."""
    return bap.scalarOffset is not None, bap.vectorOffset is not None


def is_access_dynamic(x: Any) -> bool:
    """``isAccessDynamic``: a BirAccessPattern with a scalar or vector offset.

    Accepts a ``BirAccessPattern``, an ``Access`` (dynamic only when it is
    ``Access.birPattern``, C++ kind 4) or a ``TensorRef`` (only
    ``TensorRef.abstract``, C++ kind 1, can be dynamic: the physical views
    carry no offsets).
    """
    if isinstance(x, T.BirAccessPattern):
        scalar, vector = _flags(x)
        return scalar or vector
    if isinstance(x, T.TensorRef_abstract):
        return is_access_dynamic(x.access)
    if isinstance(x, T.Access_birPattern):
        return is_access_dynamic(x.access)
    return False


def validate_only_one_of_scalar_and_vector_offset(bap: Any) -> None:
    """``_validateOnlyOneOfScalarAndVectorDynamicOffsetIsProvided``: exactly one offset kind."""
    scalar, vector = _flags(bap)
    if scalar == vector:
        raise PassError(f"{MSG_XOR}: scalar offset {'set' if scalar else 'absent'}, "
                        f"vector offset {'set' if vector else 'absent'}")


def cast_to_bir_ap(ref: Any) -> Any:
    """``castToBirAp(TensorRef)`` -> ``castToBirAp(Access)``: the BirAccessPattern inside."""
    if isinstance(ref, T.TensorRef_abstract):
        ref = ref.access
    elif isinstance(ref, T.TensorRef):
        raise PassError(MSG_CAST)
    if isinstance(ref, T.Access_birPattern):
        return ref.access
    if isinstance(ref, T.BirAccessPattern):
        return ref
    raise PassError(MSG_CAST)


def compute_accumulated_shape(shape: Any, dim: int) -> int:
    """``_computeAccumulatedShape``: product of the dim extents from ``dim`` inward.

    Walks ``shape.freeDims`` (the list; ``parDim`` is a separate scalar), so
    the result is the row-major element stride of axis ``dim`` of
    ``[parDim] + freeDims``.  ``0 <= dim <= len(freeDims) + 1`` as the seed
    asserts; past the end the product is empty (1).
    """
    dims = shape.freeDims
    if not 0 <= dim <= len(dims) + 1:
        raise PassError(f"Logic fault: indirect dim {dim} is outside a shape with {len(dims)} free dims")
    return math.prod(dims[dim:]) if dim < len(dims) else 1


# --------------------------------------------------------------------------- assemble / extract


def _operand_coef(bap: Any, arg: StaticArg, coef: int) -> int:
    """A stride in elements of the tensor's dtype as elements of the operand's (``dtypeOverride``)."""
    from tusk.stages.klr_codegen import bir_dtype  # (klr_codegen imports this module)

    nbytes = coef * DTYPE_BYTES[bir_dtype(bap.tensor.dtype)]
    size = DTYPE_BYTES[arg.dtype]
    if nbytes % size:
        raise PassError(f"tensor {bap.tensor.name}: a scalar-offset stride of {nbytes} bytes is not a whole number "
                        f"of {size}-byte elements of the access's dtype")
    return nbytes // size


def _physical_coef(arg: StaticArg, coef: int) -> int:
    """A logical element stride as a physical one (pitch form) on SB/PSUM rows that are padded."""
    if not arg.partitioned or arg.pitch == arg.logical_row or arg.logical_row <= 0:
        return coef
    if coef % arg.logical_row == 0:
        return (coef // arg.logical_row) * arg.pitch
    return coef


def index_extent(cg: Any, arg: StaticArg) -> int:
    """``indirect_dim_max_index``: how many indices the index tensor holds.

    The partition extent (``dims[0]``) of an SB/PSUM index tensor, else its
    byte size divided by the dtype size (the seed's two branches, applied to
    the index tensor as the brief reads them).
    """
    if arg.partitioned:
        return arg.nparts
    return arg.nbytes // DTYPE_BYTES[arg.dtype]


def assemble_dynamic_info(cg: Any, ref: Any, arg: StaticArg) -> DynamicAPInfo:
    """``assembleDynamicInfo``: the runtime half of a dynamic operand.

    ``arg`` is the already-encoded static operand (its pattern becomes
    ``actual_ap``).  Vector offset: ``IndirectArgExpr(1)`` with coefficient
    ``indirect_dim_max_index``; indirect dim must be 0.  Scalar offset by
    register name: ``IntRuntimeValue(reg)`` (pelican kind 7) with the
    accumulated-shape coefficient; by a full access: the shared
    ``IndirectArgExpr(1)`` (kind 3) with the same coefficient.  ``c`` is the
    static offset.
    """
    bap = cast_to_bir_ap(ref)
    validate_only_one_of_scalar_and_vector_offset(bap)
    idx = indirect(INDIRECT_ARG_ID)  # built once, shared by the vector and scalar-access paths
    scalar, vector = _flags(bap)
    if vector:
        index_arg = cg.static_access(bap.vectorOffset)
        if bap.indirectDim != 0:
            raise PassError(f"{MSG_VECTOR_DIM} (got indirectDim {bap.indirectDim})")
        max_index = index_extent(cg, index_arg)
        return DynamicAPInfo(actual_ap=arg.pattern, aff_expr=((idx, max_index),), c=arg.offset,
                             indirect_dim=0, indirect_dim_max_index=max_index)
    if scalar:
        off = bap.scalarOffset
        coef = _physical_coef(arg, _operand_coef(bap, arg, compute_accumulated_shape(bap.tensor.shape,
                                                                                     bap.indirectDim)))
        if isinstance(off, T.ScalarOffset_reg):
            if cg.fn.reg_by_name(off.r) < 0:
                raise PassError(MSG_NO_REGISTER.format(name=off.r))
            expr: QuasiAffine = runtime(off.r)
        else:
            cg.static_access(off.a)  # resolves the offset tensor's memory location
            expr = idx
        return DynamicAPInfo(actual_ap=arg.pattern, aff_expr=((expr, coef),), c=arg.offset, indirect_dim=0)
    raise PassError(MSG_NEVER)  # unreachable: the XOR validator excludes it


def _with_bap(ref: Any, bap: Any) -> Any:
    """``ref`` with its BirAccessPattern replaced (KLR values are immutable)."""
    if isinstance(ref, T.BirAccessPattern):
        return bap
    if isinstance(ref, T.Access_birPattern):
        return T.Access_birPattern(access=bap)
    return T.TensorRef_abstract(access=T.Access_birPattern(access=bap))


def extract_dynamic_ap_to_standalone(cg: Any, ref: Any) -> tuple[StaticArg, Any]:
    """``extractDynamicApToStandAlone``: hoist a gather index out of its access.

    Returns the index tensor encoded as a standalone operand (it becomes the
    instruction's ``indirection_ins``) and ``ref`` with the vector offset
    removed, so the parent access is no longer dynamic at that slot.  Only for
    the unique-indices gather: a static access, a scalar offset, or a
    missing vector offset are errors with the backend's wording.
    """
    if not is_access_dynamic(ref):
        raise PassError(MSG_EXTRACT_STATIC)
    bap = cast_to_bir_ap(ref)
    scalar, vector = _flags(bap)
    if scalar:
        raise PassError(MSG_EXTRACT_SCALAR)
    if not vector:
        raise PassError(MSG_EXTRACT_NO_VECTOR)  # unreachable after is_access_dynamic; kept as in the seed
    result = cg.static_access(bap.vectorOffset)
    cleared = dataclasses.replace(bap, vectorOffset=None)
    return result, _with_bap(ref, cleared)
