"""The KLIR schema of KLR binary files, format version 0.0.12, as one table.

This module is the single source of truth for everything else in
:mod:`ir.klr`: the value classes (:mod:`ir.klr.types`), the reader, the
writer, the JSON form and the pretty printer are all derived from
:data:`SCHEMA`.  It transcribes section 3 of ``klr-format.md`` (KLR commit
7ccd18c): every type tag, constructor order, field order and field type.

Vocabulary (the spec's):

* a *structure* has one constructor; on the wire it is the head
  ``d9 TT CC 8n`` (``CC`` = 0, except for ``KLRFile``) followed by its fields;
* an *inductive* has several constructors; ``CC`` is the 0-based constructor
  index and ``n`` that constructor's field count;
* an *enum* is an inductive whose constructors have no fields (``d9 TT v 80``).

Field types are written as strings, exactly as in the spec: the primitives
``Nat Int Bool Float String Prop``, the containers ``List[T]`` and
``Option[T]``, or the name of another schema type.  ``Prop`` fields (Lean proof
terms) are counted in the head but occupy zero bytes.

Constructor names are the C++ ones (``Immediate.reg/int32/float32``,
``TensorRef.reg``), which is what the fixtures' JSON uses; where Lean's name
differs it is kept as ``lean_name`` because KLR's C++ pretty printer builds its
wrapper class names from it (``ImmediateFloatWrapper``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Union

# --------------------------------------------------------------------------
# Type expressions
# --------------------------------------------------------------------------

PRIMITIVES = ("Nat", "Int", "Bool", "Float", "String", "Prop")


@dataclass(frozen=True)
class Prim:
    """A primitive field type: Nat, Int, Bool, Float, String or Prop."""

    name: str

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True)
class ListOf:
    """``List[item]``: a CBOR array head followed by the items."""

    item: "TypeExpr"

    def __str__(self) -> str:
        return f"List[{self.item}]"


@dataclass(frozen=True)
class OptionOf:
    """``Option[item]``: ``d9 ff 00 80`` (none) or ``d9 ff 01 81`` + item."""

    item: "TypeExpr"

    def __str__(self) -> str:
        return f"Option[{self.item}]"


@dataclass(frozen=True)
class Ref:
    """A reference to a structure, inductive or enum of the schema, by name."""

    name: str

    def __str__(self) -> str:
        return self.name


TypeExpr = Union[Prim, ListOf, OptionOf, Ref]

_CONTAINER = re.compile(r"^(List|Option)\[(.*)\]$")
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def parse_type(text: str) -> TypeExpr:
    """Parse a field type such as ``Option[List[List[Int]]]``."""
    text = text.strip()
    m = _CONTAINER.match(text)
    if m:
        inner = parse_type(m.group(2))
        return ListOf(inner) if m.group(1) == "List" else OptionOf(inner)
    if not _NAME.match(text):
        raise ValueError(f"bad KLR type expression {text!r}")
    return Prim(text) if text in PRIMITIVES else Ref(text)


# --------------------------------------------------------------------------
# Definitions
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class Field:
    """One field: its name and type, in wire order."""

    name: str
    type: TypeExpr

    @property
    def is_prop(self) -> bool:
        """Prop fields count in the head's length but have no bytes."""
        return self.type == Prim("Prop")


def _head(tag: int, ctor: int, nfields: int) -> bytes:
    # KLR caps constructors at 23 fields so that n fits the array-head byte.
    assert 0 <= tag < 256 and 0 <= ctor < 256 and 0 <= nfields < 24
    return bytes((0xD9, tag, ctor, 0x80 | nfields))


@dataclass(frozen=True)
class Struct:
    """A structure: one constructor, fields in declaration (= wire) order."""

    name: str
    tag: int
    fields: tuple[Field, ...]
    ctor: int = 0  # only KLRFile (0xf7) differs

    @property
    def head(self) -> bytes:
        """The 4 bytes every value of this structure starts with."""
        return _head(self.tag, self.ctor, len(self.fields))

    @property
    def data_fields(self) -> tuple[Field, ...]:
        """The fields that have bytes (and a Python attribute): no Props."""
        return tuple(f for f in self.fields if not f.is_prop)


@dataclass(frozen=True)
class Ctor:
    """One constructor of an inductive type."""

    name: str  # C++ name, used by the JSON form and the Python classes
    index: int  # CBOR constructor byte = C++ enum value - 1
    fields: tuple[Field, ...]
    lean_name: str | None = None  # when Lean's name differs (see module doc)

    @property
    def data_fields(self) -> tuple[Field, ...]:
        return tuple(f for f in self.fields if not f.is_prop)


@dataclass(frozen=True)
class Inductive:
    """A sum type: values start ``d9 TT <ctor index> <80 + ctor field count>``."""

    name: str
    tag: int
    ctors: tuple[Ctor, ...]

    def head(self, ctor: Ctor) -> bytes:
        return _head(self.tag, ctor.index, len(ctor.fields))

    def ctor_named(self, name: str) -> Ctor:
        for c in self.ctors:
            if c.name == name:
                return c
        raise KeyError(f"{self.name} has no constructor {name!r}")


@dataclass(frozen=True)
class Enum:
    """An inductive without fields: value v is written ``d9 TT v 80``."""

    name: str
    tag: int
    values: tuple[str, ...]

    def head(self, index: int) -> bytes:
        return _head(self.tag, index, 0)


Definition = Union[Struct, Inductive, Enum]


# --------------------------------------------------------------------------
# Small constructors that keep the table below close to the spec's layout
# --------------------------------------------------------------------------


def _fields(spec: str) -> tuple[Field, ...]:
    """``"dst: TensorRef; src: TensorRef"`` -> fields, in that order."""
    out = []
    for part in spec.split(";"):
        part = part.strip()
        if part:
            name, _, typ = part.partition(":")
            out.append(Field(name.strip(), parse_type(typ)))
    return tuple(out)


def struct(tag: int, name: str, fields: str, *, ctor: int = 0) -> Struct:
    return Struct(name, tag, _fields(fields), ctor)


def ctor(name: str, fields: str = "", *, lean: str | None = None) -> tuple:
    return (name, fields, lean)


def inductive(tag: int, name: str, ctors: list[tuple]) -> Inductive:
    return Inductive(
        name,
        tag,
        tuple(Ctor(n, i, _fields(f), lean) for i, (n, f, lean) in enumerate(ctors)),
    )


def enum(tag: int, name: str, values: str) -> Enum:
    return Enum(name, tag, tuple(values.split()))


# --------------------------------------------------------------------------
# The table (spec section 3)
# --------------------------------------------------------------------------

# §3.7: the 76 Operator variants, in constructor order, with payload types.
OPERATORS: tuple[tuple[str, str], ...] = (
    ("activate", "Activate"),
    ("ncActivate", "NcActivate"),
    ("activationReduce", "NcActivate"),
    ("affineSelect", "AffineSelect"),
    ("ncAffineSelect", "NcAffineSelect"),
    ("batchNormAggregate", "BatchNormAggregate"),
    ("batchNormStats", "BatchNormStats"),
    ("copy", "Copy"),
    ("ncCopy", "NcCopy"),
    ("copyPredicated", "CopyPredicated"),
    ("dmaCopy", "DmaCopy"),
    ("ncDmaCopy", "NcDmaCopy"),
    ("dmaTranspose", "DmaTranspose"),
    ("dropout", "Dropout"),
    ("findIndex8", "FindIndex8"),
    ("iota", "Iota"),
    ("loadMaskRegister", "LoadMaskRegister"),
    ("loadStationary", "LoadStationary"),
    ("localGather", "LocalGather"),
    ("ncLocalGather", "NcLocalGather"),
    ("matMul", "MatMul"),
    ("ncMatMul", "NcMatMul"),
    ("matchReplace8", "MatchReplace8"),
    ("matchValueLoad", "MatchValueLoad"),
    ("max8", "Max8"),
    ("memSet", "MemSet"),
    ("rangeSelect", "RangeSelect"),
    ("ncRangeSelect", "NcRangeSelect"),
    ("reciprocal", "Reciprocal"),
    ("scalarTensorTensor", "ScalarTensorTensor"),
    ("ncScalarTensorTensor", "NcScalarTensorTensor"),
    ("shuffle", "Shuffle"),
    ("tensorReduce", "TensorReduce"),
    ("tensorScalar", "TensorScalar"),
    ("tensorTensor", "TensorTensor"),
    ("tensorTensorScan", "TensorTensorScan"),
    ("tensorPartitionReduce", "TensorPartitionReduce"),
    ("tensorScalarReduce", "TensorScalarReduce"),
    ("transpose", "Transpose"),
    ("selectReduce", "SelectReduce"),
    ("sequenceBounds", "SequenceBounds"),
    ("sendRecv", "SendRecv"),
    ("sendRecvCompute", "SendRecvCompute"),
    ("tensorLoad", "TensorLoad"),
    ("tensorStore", "TensorStore"),
    ("registerMove", "RegisterMove"),
    ("cmpBranch", "CmpBranch"),
    ("registerAluOp", "RegisterAluOp"),
    ("quantizeMX", "QuantizeMX"),
    ("ncMatMulMX", "MatMulMX"),
    ("dmaCompute", "DmaCompute"),
    ("allReduce", "CollectiveOp"),
    ("allGather", "CollectiveOp"),
    ("reduceScatter", "CollectiveOp"),
    ("collectivePermute", "CollectiveOp"),
    ("collectivePermuteImplicit", "CollectiveOp"),
    ("collectivePermuteImplicitReduce", "CollectiveOp"),
    ("broadcast", "CollectiveOp"),
    ("allToAll", "CollectiveOp"),
    ("rankId", "RankId"),
    ("currentProcessingRankId", "CurrentProcessingRankId"),
    ("send", "Send"),
    ("recv", "Recv"),
    ("coreBarrier", "CoreBarrier"),
    ("rng", "Rng"),
    ("rand2", "Rand2"),
    ("randGetState", "RandGetState"),
    ("setRngSeed", "SetRngSeed"),
    ("randSetState", "RandSetState"),
    ("extendedInst", "ExtendedInst"),
    ("tensorScalarCumulative", "TensorScalarCumulative"),
    ("ncNGather", "NcNGather"),
    ("nonzeroWithCount", "NonzeroWithCount"),
    ("devicePrint", "DevicePrint"),
    ("exponential", "Exponential"),
    ("activate2", "Activate2"),
)

_TABLE: list[Definition] = [
    # §3.2 kernel containers
    struct(0x6C, "LncKernel",
           "name: String; inputs: List[TensorName]; outputs: List[TensorName];"
           " bodies: List[List[Block]]; sharedConstants: List[SharedConstantFile];"
           " sharedBuffers: List[TensorName]; edges: List[Edges]"),
    struct(0x69, "Kernel",
           "name: String; inputs: List[TensorName]; outputs: List[TensorName]; body: List[Block]"),
    struct(0x68, "Block", "label: String; noReorder: Bool; body: List[Stmt]"),
    inductive(0x67, "Stmt", [
        ctor("oper", "op: Operator; name: Option[String]; pos: Pos"),
    ]),
    struct(0x64, "Pos",
           "line: Nat; column: Nat; lineEnd: Option[Nat]; columnEnd: Option[Nat];"
           " filename: Option[String]"),
    struct(0x6A, "SharedConstantFile", "name: String; fileName: String"),
    struct(0x6B, "Edges", "fromEdge: String; toEdges: List[String]"),

    # §3.3 tensors and memory placement
    struct(0x72, "TensorName",
           "name: String; dtype: Dtype; shape: Shape; address: Address; freeElements: Nat;"
           " parWF: Prop; freeWF: Prop; addressRotation: Bool"),
    struct(0x70, "Shape", "parDim: Nat; freeDims: List[Nat]"),
    struct(0x71, "Address",
           "name: String; memory: Memory; parSize: Nat; freeSize: Nat;"
           " parOffset: Option[Nat]; freeOffset: Option[Nat]; isShared: Bool"),
    enum(0x6E, "Memory", "hbm sbuf psum reg shared_hbm private_hbm"),
    enum(0x6F, "Dtype",
         "bfloat16 float8e3 float8e4 float8e5 float16 float32 float32r int8 int16 int64"
         " int32 uint8 uint16 uint32 uint64 float8_e4m3 float8_e4m3fn float8_e5m2_x4"
         " float8_e4m3fn_x4 float4_e2m1fn_x4"),
    struct(0x7F, "TensorSram",
           "name: String; dtype: Dtype; parNum: Nat; pattern: List[APPair];"
           " parOffset: Nat; freeOffset: Nat"),
    struct(0x7E, "TensorHbm", "name: String; dtype: Dtype; address: Nat; dims: List[APPair]"),

    # §3.4 tensor references and accesses
    inductive(0x80, "TensorRef", [
        ctor("abstract", "access: Access"),
        ctor("sbuf", "view: TensorSram"),
        ctor("psum", "view: TensorSram"),
        ctor("hbm", "view: TensorHbm"),
        ctor("reg", "reg: Nat", lean="register"),
    ]),
    inductive(0x7D, "Access", [
        ctor("simple", "tensor: TensorName"),
        ctor("basic", "access: AccessBasic"),
        ctor("pattern", "access: AccessPattern"),
        ctor("birPattern", "access: BirAccessPattern"),
    ]),
    struct(0x7C, "BirAccessPattern",
           "tensor: TensorName; offset: Nat; pattern: List[APPair];"
           " scalarOffset: Option[ScalarOffset]; vectorOffset: Option[Access];"
           " indirectDim: Int; dtypeOverride: Option[Dtype]"),
    struct(0x77, "APPair", "step: Int; num: Nat; offset: Nat"),
    inductive(0x7B, "ScalarOffset", [
        ctor("reg", "r: String"),
        ctor("acc", "a: Access"),
    ]),
    struct(0x76, "AccessBasic", "tensor: TensorName; indexes: List[Index]; lenWF: Prop"),
    inductive(0x75, "Index", [
        ctor("coord", "e: Nat"),
        ctor("slice", "slice: Slice"),
    ]),
    struct(0x73, "Slice", "l: Nat; u: Nat; step: Int; wf: Prop"),
    struct(0x78, "AccessPattern",
           "tensor: TensorName; parNum: Nat; pattern: List[APPair]; parOffset: Nat;"
           " freeOffset: Nat; fixedAxis: List[Nat]"),

    # §3.5 operand-level types
    inductive(0x83, "Immediate", [
        ctor("reg", "reg: Nat", lean="register"),
        ctor("pointer"),
        ctor("int32", "i: Int", lean="int"),
        ctor("float32", "f: Float", lean="float"),
    ]),
    inductive(0x85, "Operand", [
        ctor("imm", "i: Immediate"),
        ctor("tile", "t: TensorRef"),
    ]),
    inductive(0x84, "ActivationImm", [
        ctor("reg", "reg: Nat", lean="register"),
        ctor("pointer"),
        ctor("float32", "f: Float", lean="float"),
    ]),
    inductive(0x8D, "DmaBounds", [
        ctor("skip"),
        ctor("error"),
        ctor("reg", "reg: Nat"),
    ]),
    inductive(0x8F, "IndexMissBehavior", [
        ctor("imm", "value: Immediate"),
        ctor("skip"),
    ]),
    struct(0x86, "DataPattern", "offset: Int; pattern: List[APPair]; channelMultiplier: Int"),
    inductive(0xC6, "ReplicaGroup", [
        ctor("unspecified"),
        ctor("named", "name: String"),
        ctor("literal", "groups: List[List[Int]]"),
    ]),

    # §3.6 enumerations
    enum(0x82, "Engine", "unassigned act dma dve pe pool sp"),
    enum(0x87, "AluOp",
         "abs add arith_shift_left arith_shift_right average bitwise_and bitwise_not"
         " bitwise_or bitwise_xor bypass divide is_equal is_ge is_gt is_le is_lt"
         " logical_and logical_or logical_shift_left logical_shift_right logical_xor"
         " max min mod mult not_equal pow rsqrt subtract"),
    enum(0x8A, "ActivationFunc",
         "abs arctan copy erf erf_dx exp gelu gelu_apprx_tanh gelu_dx log mish reciprocal"
         " relu rsqrt sigmoid sign silu silu_dx sin softplus sqrt square tanh"
         " gelu_apprx_sigmoid gelu_apprx_sigmoid_dx"),
    enum(0xBD, "BrCmpOp",
         "always lt_imm le_imm eq_imm ne_imm ge_imm gt_imm lt_reg le_reg eq_reg ne_reg"
         " ge_reg gt_reg"),
    enum(0x89, "AccumCmd", "Idle Zero Accumulate ZeroAccumulate LoadAccumulate"),
    enum(0x90, "TensorScalarReverseOps", "none first second both"),
    enum(0x91, "TensorSubDim", "X XY XYZ XYZW"),
    enum(0x92, "TransposeOps",
         "None WZXY WXZY WYXZ ZWYX ZYWX ZYXW YXWZ YXZW YWZX XWZY XZYW XYZW XYWZ"),
    enum(0x81, "MatmulPerfMode", "None DoubleRow DoubleRowSwInterleave"),
    enum(0x8E, "MatmulGroupElement", "first middle last whole"),
    enum(0x8B, "AffineSelectCmp", "GreaterThan GreaterThanEq Eq NotEq"),
    enum(0x8C, "DgeComputeOp", "none add"),
    enum(0x88, "DropoutThresholdType", "DropRate KeepRate"),
    enum(0xD6, "PrintOutputBuffer", "stdout stderr"),

    # §3.7 the operator sum type
    inductive(0xDA, "Operator", [ctor(v, f"op: {payload}") for v, payload in OPERATORS]),

    # §3.8 payloads of the common operators
    struct(0x99, "NcDmaCopy",
           "dst: TensorRef; src: TensorRef; compute_op: DgeComputeOp; oobMode: DmaBounds;"
           " dgeMode: Nat; uniqueIndices: Bool; priority: Option[Nat]; engine: Engine"),
    struct(0x98, "DmaCopy",
           "dst: TensorRef; src: TensorRef; compute_op: DgeComputeOp;"
           " dstBoundsCheck: DmaBounds; srcBoundsCheck: DmaBounds"),
    struct(0x9A, "DmaTranspose",
           "dst: TensorRef; src: TensorRef; axes: TransposeOps; dtype: Option[Dtype];"
           " dgeMode: Nat; oobMode: DmaBounds; priority: Option[Nat]"),
    struct(0xB6, "TensorTensor",
           "dst: TensorRef; src0: TensorRef; src1: TensorRef; op: AluOp;"
           " dtype: Option[Dtype]; engine: Engine"),
    struct(0xB4, "TensorScalar",
           "dst: TensorRef; src: TensorRef; imm0: Operand; op0: AluOp; imm1: Option[Operand];"
           " op1: Option[AluOp]; reverse: TensorScalarReverseOps; engine: Engine;"
           " dtype: Option[Dtype]"),
    struct(0xA6, "ScalarTensorTensor",
           "dst: TensorRef; src0: TensorRef; src1: TensorRef; op0: AluOp; op1: AluOp;"
           " reverseOperands: TensorScalarReverseOps; imm0: Immediate; accumulatorCmd: AccumCmd"),
    struct(0xA7, "NcScalarTensorTensor",
           "dst: TensorRef; data: TensorRef; src0: Operand; src1: Operand; op0: AluOp;"
           " op1: AluOp; reverseOperands: TensorScalarReverseOps; dtype: Option[Dtype]"),
    struct(0xB3, "TensorReduce",
           "dst: TensorRef; src: TensorRef; op: AluOp; opDim: TensorSubDim; negated: Bool;"
           " dtype: Option[Dtype]; keepdims: Bool"),
    struct(0xB5, "TensorScalarReduce",
           "dst: TensorRef; src: TensorRef; operand0: Operand; op0: AluOp; reverse0: Bool;"
           " dtype: Option[Dtype]; reduceOp: Option[AluOp]; reduceRes: TensorRef;"
           " reduceCmd: AccumCmd; reduceInit: Option[Immediate]"),
    struct(0xB8, "TensorPartitionReduce",
           "dst: TensorRef; op: AluOp; data: TensorRef; dtype: Option[Dtype]"),
    struct(0xB0, "Reciprocal", "dst: TensorRef; src: TensorRef; dtype: Option[Dtype]"),
    struct(0xB9, "SelectReduce",
           "dst: TensorRef; predicate: TensorRef; onTrue: TensorRef; onFalse: Operand;"
           " reduceRes: Option[TensorRef]; reduceCmd: AccumCmd; reduceOp: AluOp;"
           " reversePred: Bool; dtype: Option[Dtype]"),
    struct(0xA8, "CopyPredicated",
           "dst: TensorRef; src: TensorRef; predicate: TensorRef; dtype: Option[Dtype];"
           " reversePred: Bool"),
    struct(0x95, "NcActivate",
           "dst: TensorRef; src: TensorRef; accumulatorCmd: AccumCmd;"
           " activationFunc: ActivationFunc; scale: Operand; bias: Option[TensorRef];"
           " reduceOp: Option[AluOp]; reduceRes: Option[TensorRef]; dtype: Option[Dtype]"),
    struct(0x94, "Activate",
           "dst: TensorRef; src: TensorRef; accumulatorCmd: AccumCmd;"
           " activationFunc: ActivationFunc; scale: Immediate; bias: Immediate; imm: Immediate"),
    struct(0xD9, "Activate2",
           "dst: TensorRef; src: TensorRef; op0: AluOp; op1: AluOp; imm0: Operand;"
           " imm1: Operand; activationFunc: ActivationFunc; reluParam: Operand;"
           " reduceOp: AluOp; reduceRes: Option[TensorRef]; reduceCmd: AccumCmd;"
           " reverse0: Bool; reverse1: Bool; dtype: Option[Dtype]"),
    struct(0xD8, "Exponential",
           "dst: TensorRef; src: TensorRef; maxValue: Operand; reduceRes: Option[TensorRef];"
           " reducecmd: AccumCmd; reduceInit: Operand"),
    struct(0xB7, "NcMatMul",
           "dst: TensorRef; stationary: TensorRef; moving: TensorRef;"
           " isStationaryOneZero: Bool; isMovingZero: Bool; isTranspose: Bool;"
           " tilePosition: List[Nat]; tileSize: List[Nat]; perfMode: MatmulPerfMode"),
    struct(0xA1, "MatMul", "dst: TensorRef; moving: TensorRef"),
    struct(0xA0, "LoadStationary", "src: TensorRef; isTranspose: Bool"),
    struct(0x9B, "Transpose",
           "dst: TensorRef; src: TensorRef; dtype: Option[Dtype]; engine: Engine"),
    struct(0xB2, "NcCopy", "dst: TensorRef; src: TensorRef; dtype: Option[Dtype]; engine: Engine"),
    struct(0xB1, "Copy", "dst: TensorRef; src: TensorRef; opDim: Option[TensorSubDim]"),
    struct(0x9E, "MemSet", "dst: TensorRef; value: Immediate; dtype: Dtype; engine: Engine"),
    struct(0x9F, "Iota", "dst: TensorRef; pattern: DataPattern; dtype: Option[Dtype]"),
    struct(0x97, "NcAffineSelect",
           "dst: TensorRef; pred: DataPattern; onTrueTile: TensorRef;"
           " onFalseValue: Immediate; dtype: Option[Dtype]; cmpOp: AluOp"),
    struct(0xA3, "NcLocalGather",
           "dst: TensorRef; src: TensorRef; index: TensorRef; numElemPerIdx: Immediate;"
           " numValidIndicies: Option[Immediate]"),
    struct(0xC0, "RegisterMove", "dst: String; imm: Int"),
    struct(0xC2, "RegisterAluOp", "dst: String; src: String; imm: Int; op: AluOp"),
    struct(0xBE, "TensorLoad", "dst: String; src: TensorRef"),
    struct(0xBF, "TensorStore", "dst: TensorRef; src: String"),
    struct(0xC1, "CmpBranch",
           "reg1: String; reg2: String; imm: Int; op: BrCmpOp; trueLabel: String;"
           " falseLabel: String"),
    struct(0xCC, "CoreBarrier", "data: TensorRef; cores: List[Int]; engine: Engine"),

    # §3.9 payloads of all remaining operators
    struct(0x96, "AffineSelect",
           "dst: TensorRef; src: TensorRef; fillMode: AffineSelectCmp; fillReg: Nat;"
           " maskPattern: DataPattern"),
    struct(0xAE, "BatchNormAggregate", "dst: TensorRef; src: TensorRef; dtype: Option[Dtype]"),
    struct(0xAF, "BatchNormStats", "dst: TensorRef; src: TensorRef; dtype: Option[Dtype]"),
    struct(0x93, "Dropout",
           "dst: TensorRef; src: TensorRef; thresholdType: DropoutThresholdType;"
           " threshold: Operand; dtype: Option[Dtype]"),
    struct(0xAB, "FindIndex8",
           "dst: TensorRef; src: TensorRef; vals: TensorRef; dtype: Option[Dtype]"),
    struct(0x9C, "LoadMaskRegister", "regNum: Nat"),
    struct(0xA2, "LocalGather",
           "dst: TensorRef; src: TensorRef; indexMissBehavior: IndexMissBehavior;"
           " freePoolBuffer: Bool"),
    struct(0xAC, "MatchReplace8",
           "dst: TensorRef; src: TensorRef; vals: TensorRef; replaceValue: Immediate;"
           " dstIdx: Option[TensorRef]; dtype: Option[Dtype]"),
    struct(0xAA, "MatchValueLoad", "src: TensorRef"),
    struct(0xAD, "Max8", "dst: TensorRef; src: TensorRef; dtype: Option[Dtype]"),
    struct(0xA4, "RangeSelect",
           "dst: TensorRef; src: TensorRef; reduceCommand: AccumCmd; reduceOp: AluOp;"
           " base: Float; fillValue: Float; compOp0: AluOp; compOp1: AluOp;"
           " bound0: Immediate; bound1: Immediate"),
    struct(0xA5, "NcRangeSelect",
           "dst: TensorRef; reduceCommand: AccumCmd; reduceRes: Option[TensorRef];"
           " reduceOp: Option[AluOp]; compOp0: AluOp; compOp1: AluOp; bound0: TensorRef;"
           " bound1: TensorRef; rangeStart: Immediate; onTrueTile: TensorRef;"
           " onFalseValue: Immediate; dtype: Option[Dtype]"),
    struct(0x9D, "Shuffle",
           "dst: TensorRef; src: TensorRef; shuffleMask: List[Immediate]; dtype: Option[Dtype]"),
    struct(0xA9, "TensorTensorScan",
           "dst: TensorRef; src0: TensorRef; src1: TensorRef; op0: AluOp; op1: AluOp;"
           " reverseOperands: TensorScalarReverseOps; imm0: Operand; accumulatorCmd: AccumCmd;"
           " dtype: Option[Dtype]"),
    struct(0xBA, "SequenceBounds",
           "dst: TensorRef; segmentIds: TensorRef; dtype: Option[Dtype]"),
    struct(0xBB, "SendRecv",
           "dst: TensorRef; src: TensorRef; sendToRank: Immediate; recvFromRank: Immediate;"
           " pipeId: Immediate; useGpsimdDma: Bool"),
    struct(0xBC, "SendRecvCompute",
           "dsts: List[TensorRef]; srcs: List[TensorRef]; sendToRanks: List[Immediate];"
           " recvFromRanks: List[Immediate]; pipeId: Immediate; op: AluOp"),
    struct(0xC3, "QuantizeMX", "dst: TensorRef; src: TensorRef; dstScale: TensorRef"),
    struct(0xC4, "MatMulMX",
           "dst: TensorRef; stationary: TensorRef; moving: TensorRef;"
           " stationaryScale: TensorRef; movingScale: TensorRef;"
           " tilePosition: Option[List[Nat]]; tileSize: Option[List[Nat]]"),
    struct(0xC5, "DmaCompute",
           "dst: TensorRef; srcs: List[TensorRef]; scales: List[Immediate]; reduceOp: AluOp"),
    struct(0xC7, "CollectiveOp",
           "dsts: List[TensorRef]; srcs: List[TensorRef]; op: Option[AluOp];"
           " replicaGroup: ReplicaGroup; concatDim: Option[Int];"
           " sourceTargetPairs: Option[List[List[Int]]]; channel_id: Option[Int];"
           " num_channels: Option[Int]; priority: Option[Nat]"),
    struct(0xC8, "RankId", "dst: String"),
    struct(0xC9, "CurrentProcessingRankId",
           "dst: String; iterationId: Int; channelId: Int; numChannels: Int;"
           " replicaGroup: List[List[Int]]"),
    struct(0xCA, "Send", "op: AluOp; srcs: List[TensorRef]; peerId: Int"),
    struct(0xCB, "Recv", "op: AluOp; dsts: List[TensorRef]; replicaGroups: List[Int]; peerId: Int"),
    struct(0xCD, "Rng", "dst: TensorRef; engine: Engine"),
    struct(0xCE, "Rand2", "dst: TensorRef; min: Operand; max: Operand"),
    struct(0xCF, "RandGetState", "dst: TensorRef; engine: Engine"),
    struct(0xD0, "SetRngSeed", "src: TensorRef"),
    struct(0xD1, "RandSetState", "src: TensorRef; engine: Engine"),
    struct(0xD2, "ExtendedInst",
           "opcode: Nat; hasRead: Bool; hasWrite: Bool; ports: Nat; data0: List[Nat];"
           " data1: List[Nat]"),
    struct(0xD3, "TensorScalarCumulative",
           "dst: TensorRef; src: TensorRef; op0: AluOp; op1: AluOp; imm0: Operand;"
           " imm1: Option[Operand]; reduceCmd: AccumCmd; reverse: TensorScalarReverseOps;"
           " dtype: Option[Dtype]"),
    struct(0xD4, "NcNGather",
           "dst: TensorRef; data: TensorRef; indices: TensorRef; dtype: Option[Dtype]"),
    struct(0xD5, "NonzeroWithCount",
           "dst: TensorRef; src: TensorRef; indexOffset: Immediate; paddingVal: Immediate"),
    struct(0xD7, "DevicePrint", "src: TensorRef; printPrefix: String; buffer: PrintOutputBuffer"),

    # §1: the three file-level items.  KLRFile's head d9 d9 f7 83 doubles as
    # CBOR's "self-described" tag 55799; tag 0xd9 is shared with Activate2.
    struct(0xD9, "KLRFile", "major: Nat; minor: Nat; patch: Nat", ctor=0xF7),
    struct(0xEB, "KLRMetaData", "format: String"),
    # Payloads as the C++ reader models them (spec §1.4): python/nki are
    # really Lean AST kernels that C++ cannot read; only lnc is supported.
    inductive(0xEC, "Contents", [
        ctor("python", "kernel: Kernel"),
        ctor("nki", "kernel: Kernel"),
        ctor("kernel", "kernel: Kernel"),
        ctor("lnc", "kernel: LncKernel"),
        ctor("hlo", "name: String"),
    ]),
]

#: Every schema type by name.
SCHEMA: dict[str, Definition] = {d.name: d for d in _TABLE}

#: The on-disk format version this table describes.
FORMAT_VERSION = (0, 0, 12)

#: Contents constructor a backend consumes (CBOR 3; C++ ``Contents::Tag`` 4).
LNC_CONTENTS = "lnc"


def referenced_names(t: TypeExpr) -> list[str]:
    """Schema type names mentioned in a type expression."""
    if isinstance(t, (ListOf, OptionOf)):
        return referenced_names(t.item)
    if isinstance(t, Ref):
        return [t.name]
    return []


def fields_of(d: Definition) -> list[Field]:
    """All fields of a definition, over all constructors."""
    if isinstance(d, Struct):
        return list(d.fields)
    if isinstance(d, Inductive):
        return [f for c in d.ctors for f in c.fields]
    return []


def recursive_types(schema: dict[str, Definition] = SCHEMA) -> frozenset[str]:
    """Names of the types that can (indirectly) contain themselves.

    In KLIR these are Access, BirAccessPattern and ScalarOffset (spec §2.8);
    the reader and writer follow them on an explicit stack past a few levels (ir.klr.nesting).
    """
    edges = {
        name: {r for f in fields_of(d) for r in referenced_names(f.type)}
        for name, d in schema.items()
    }

    def reaches(start: str, goal: str) -> bool:
        seen, todo = set(), list(edges[start])
        while todo:
            n = todo.pop()
            if n == goal:
                return True
            if n not in seen:
                seen.add(n)
                todo.extend(edges[n])
        return False

    return frozenset(n for n in schema if reaches(n, n))


def _check_table() -> None:
    """Fail at import time if the table is internally inconsistent."""
    for d in _TABLE:
        for f in fields_of(d):
            for r in referenced_names(f.type):
                if r not in SCHEMA:
                    raise AssertionError(f"{d.name}.{f.name}: unknown type {r}")
    if len(SCHEMA) != len(_TABLE):
        raise AssertionError("duplicate type name in the KLR schema table")
    heads = [
        h
        for d in _TABLE
        for h in (
            [d.head] if isinstance(d, Struct)
            else [d.head(c) for c in d.ctors] if isinstance(d, Inductive)
            else [d.head(i) for i in range(len(d.values))]
        )
    ]
    if len(set(heads)) != len(heads):
        raise AssertionError("two KLR constructors share a head")


_check_table()
