"""Enumerations of the BIR wire format: one table each, names as on the wire.

The ordinals are the in-memory values of neuronx-cc 2.24 (see
../shared/specs/bir-json.md); the wire always carries the *name*.
"""

from __future__ import annotations

import numpy as np

# InstructionType, ordinals 0..109 (spec §2.3).
OPCODE_NAMES: tuple[str, ...] = (
    "Generic", "GenericCopy", "GenericRelu", "AbstractCopy", "Activation",
    "ReadActivationAccumulator", "LoadActFuncSet", "MatmultBase", "Matmult", "MatmultSparse",
    "Memset", "GetGlobalRankId", "NoOp", "EventSemaphore", "GroupResetSemaphores",
    "AllEngineBarrier", "Drain", "Halt", "DMA", "Load",
    "Pool", "Reciprocal", "Save", "TensorCopy", "TensorCopyDynamicSrc",
    "TensorCopyDynamicDst", "IndirectCopy", "TensorReduce", "TensorScalar", "TensorScalarPtr",
    "TensorScalarCache", "TensorTensor", "DMACopy", "GPSIMDSB2SB", "BNStats",
    "BNStatsAggregate", "BNGradients", "BNBackprop", "BNBackprop2", "StreamShuffle",
    "StreamTranspose", "ReadVarAddr", "GenericIndirectLoad", "IndirectLoad", "GenericIndirectSave",
    "IndirectSave", "IndirectSaveAccumulate", "Collective", "CollectiveCompute", "CollectiveSend",
    "CollectiveRecv", "Select", "CopyPredicated", "CustomOp", "BIRKernel",
    "NKIKernel", "NKIKLIRKernel", "DevicePrint", "GetRandState", "SetRandState",
    "Rand", "Iota", "TensorScalarAffineSelect", "RangeSelect", "GetSequenceBounds",
    "Dropout", "GetCurProcessingRankID", "DMATrigger", "DMADescriptor", "DMADescriptorCopy",
    "DMADescriptorCCE", "DMADescriptorTranspose", "DMADescriptorReplicate", "RegisterAlu", "RegisterMove",
    "TensorLoad", "TensorSave", "Terminator", "CompareAndBranch", "UnconditionalBranch",
    "BranchHint", "Return", "Exit", "Break", "Call",
    "SwitchQueueInstance", "ResetQueueInstance", "CoreBarrier", "Max", "MaxIndex",
    "MatchReplace", "MaxIndexAndMatchReplace", "Gather", "InlineASMBytes", "TensorCompletion",
    "MatmultMx", "QuantizeMx", "Rand2", "RandSetState", "RandGetState",
    "Rng", "ActivationReadAccumulator", "DveReadAccumulator", "Exponential", "NonzeroWithCount",
    "Loop", "DynamicForLoop", "DMABlock", "DoWhile", "TongaReduceMacroSymbolic",
)
assert len(OPCODE_NAMES) == 110
# Opcodes of the KLR producer (K, ../shared/specs/bir-json-evidence.md) that 2.24 does not list: read and
# written as opaque instructions (the verifier accepts them, the interpreter refuses them).  Tusk-only
# ordinals 110.. (no backend ordinal is known).
KLR_OPCODE_NAMES: tuple[str, ...] = (
    "Shuffle", "CalcVarAddr", "CalcVarAddrSymbolic", "IotaSymbolic", "MatmultSymbolic", "RangeSelectSymbolic",
    "ShuffleSymbolic", "StreamShuffleSymbolic", "TensorScalarAffineSelectSymbolic", "TensorScalarSymbolic",
    "NonzeroWithCount",  # Tusk's lowering of KLR's nonzeroWithCount (GpSimd), run by the interpreter
)
OPCODE_NAMES = OPCODE_NAMES + KLR_OPCODE_NAMES
OPAQUE_OPCODES = frozenset(range(110, len(OPCODE_NAMES)))
OPCODE_BY_NAME: dict[str, int] = {n: i for i, n in enumerate(OPCODE_NAMES)}


class Op:
    """Opcode ordinals the passes test for, by name (a readable subset)."""

    GenericCopy = 1
    Activation = 4
    Matmult = 8
    Memset = 10
    NoOp = 12
    Load = 19
    Pool = 20
    Reciprocal = 21
    Save = 22
    TensorCopy = 23
    IndirectCopy = 26
    TensorReduce = 27
    TensorScalar = 28
    TensorScalarPtr = 29
    TensorTensor = 31
    DMACopy = 32
    Select = 51
    NKIKernel = 55
    NKIKLIRKernel = 56
    Iota = 61
    TensorScalarAffineSelect = 62
    RegisterAlu = 73
    RegisterMove = 74
    TensorLoad = 75
    TensorSave = 76
    CompareAndBranch = 78
    UnconditionalBranch = 79
    Call = 84
    CoreBarrier = 87
    Max = 88
    Gather = 92
    Exponential = 103
    Loop = 105
    DynamicForLoop = 106
    DMABlock = 107
    DoWhile = 108


LOOP_OPCODES = frozenset({Op.Loop, Op.DynamicForLoop, Op.DoWhile})
# users of an engine's random generator (hidden state: seeding sets it, every draw advances it)
RNG_OPCODES = frozenset(OPCODE_BY_NAME[n] for n in ("SetRandState", "RandSetState", "GetRandState", "RandGetState",
                                                    "Rng", "Rand2", "Dropout"))
# an engine's reduce registers (tusk.sim.accumulators): these opcodes set them when their ``acc`` (Exponential,
# RangeSelect: ``reduce_cmd``) is not one of IDLE_ACCUMULATION; a read-accumulator writes them out
ACCUMULATING_OPCODES = frozenset((Op.Activation, Op.TensorScalar, Op.TensorScalarPtr,
                                  *(OPCODE_BY_NAME[n] for n in ("Exponential", "RangeSelect"))))
READ_ACCUMULATOR_OPCODES = frozenset(OPCODE_BY_NAME[n] for n in ("ActivationReadAccumulator", "DveReadAccumulator"))
IDLE_ACCUMULATION = (None, "Idle", 0, False)

# EngineType (spec §2.1): Unassigned 0 .. ALL 7.
ENGINE_NAMES: tuple[str, ...] = ("Unassigned", "Pool", "Activation", "PE", "DMA", "DVE", "SP", "ALL")
ENGINE_BY_NAME = {n: i for i, n in enumerate(ENGINE_NAMES)}


class Engine:
    Unassigned, Pool, Activation, PE, DMA, DVE, SP, ALL = range(8)


# EdgeKind (spec §2.1).  MAX of kinds wins when two edges join the same pair.
EDGE_NAMES: tuple[str, ...] = ("Invalid", "Ordered", "Anti", "Output", "Flow")
EDGE_BY_NAME = {n: i for i, n in enumerate(EDGE_NAMES)}


class Edge:
    Invalid, Ordered, Anti, Output, Flow = range(5)


# MemoryType: in memory a bit flag; only DRAM/SB/PSUM are placeable.
class Mem:
    DRAM = 8
    SB = 16
    PSUM = 32


MEM_NAMES = {1: "Unallocated", 2: "Input", 4: "Output", 8: "DRAM", 16: "SB", 32: "PSUM",
             64: "RNGSTATE", 128: "REG"}
MEM_BY_NAME = {n: v for v, n in MEM_NAMES.items()}

# TensorKind (memory-location-set "kind"), ordinals 0..9.
TENSOR_KIND_NAMES: tuple[str, ...] = (
    "ExternalInput", "ExternalInputParameter", "Input", "ExternalOutput", "ExternalOutputParameter",
    "Output", "Const", "Internal", "Pointer", "InternalInterface",
)
TENSOR_KIND_BY_NAME = {n: i for i, n in enumerate(TENSOR_KIND_NAMES)}


class TensorKind:
    ExternalInput, ExternalInputParameter, Input, ExternalOutput, ExternalOutputParameter, \
        Output, Const, Internal, Pointer, InternalInterface = range(10)


INPUT_KINDS = frozenset({0, 1, 2})
OUTPUT_KINDS = frozenset({3, 4, 5})

# TensorClass (set-level "tensor_class"); -1 means "not given".
TENSOR_CLASS_NAMES: tuple[str, ...] = (
    "Tensor", "LoopTensor", "SingleValueTensor", "NeuronTensor", "NeuronWeightTensor",
    "IdentityWeightTensor", "NeuronBlockTensor", "DRAM2DBlockTensor", "Neuron3DBlockTensor",
    "DRAM3DBlockTensor", "NeuronLocalTensor", "NeuronSBTensor", "NeuronPSUMTensor",
)
TENSOR_CLASS_BY_NAME = {n: i for i, n in enumerate(TENSOR_CLASS_NAMES)}

# Dtype (spec §6.3): names, byte sizes, and the numpy type the interpreter uses.
DTYPE_NAMES: tuple[str, ...] = (
    "uint8", "int8", "float4_e2m1fn_x4", "float8e3", "float8e4", "float8_e4m3fn", "float8_e8m0fnu",
    "float8e5", "float8_e4m3fn_x4", "float8_e5m2_x4", "uint16", "int16", "bfloat16", "float16",
    "uint32", "int32", "float32", "float32r", "uint64", "int64",
    "bool",  # Tusk-only ordinal 20: real 2.27 dumps name it (evidence D, DSA), 1 byte
)
DTYPE_SIZES: tuple[int, ...] = (1, 1, 2, 1, 1, 1, 1, 1, 4, 4, 2, 2, 2, 2, 4, 4, 4, 4, 8, 8, 1)
DTYPE_BY_NAME = {n: i for i, n in enumerate(DTYPE_NAMES)}
DTYPE_SIZE_ARRAY = np.array(DTYPE_SIZES, dtype=np.int64)


class Dt:
    uint8, int8 = 0, 1
    uint16, int16, bfloat16, float16 = 10, 11, 12, 13
    uint32, int32, float32, float32r = 14, 15, 16, 17
    uint64, int64 = 18, 19
    bool_ = 20


# Operand kinds (in-memory ArgumentKind) and their wire spellings (spec §3).
class Kind:
    PHYSICAL = 1
    SYMBOLIC = 2
    REGISTER_AP = 3
    IMM = 6
    SYMBOLIC_IMM = 7
    IMM_ARRAY = 8
    REGISTER = 11
    # Tusk-only: a symbolic_ap with one address expression per access-pattern dimension (K's form),
    # kept as read; passes that need its element offset refuse it.
    SYMBOLIC_DIMS = 13


OPERAND_KIND_NAMES = {1: "physical_ap", 2: "symbolic_ap", 3: "register_ap", 6: "imm_value",
                      7: "symbolic_imm_value", 8: "imm_array", 11: "register_access", 13: "symbolic_ap"}
OPERAND_KIND_BY_NAME = {n: k for k, n in OPERAND_KIND_NAMES.items() if k != Kind.SYMBOLIC_DIMS}
OPERAND_KIND_BY_NAME["symbolic_pwap"] = Kind.SYMBOLIC
AP_KINDS = frozenset({Kind.PHYSICAL, Kind.SYMBOLIC, Kind.REGISTER_AP, Kind.SYMBOLIC_DIMS})


class Role:
    """Which operand list an operand sits in (wire: ins / indirection_ins / outs)."""

    IN = 0
    INDIRECT = 1
    OUT = 2


ROLE_KEYS = ("ins", "indirection_ins", "outs")


class FnAttr:
    """Function attribute flags (``Function::hasAttribute(n)``) the passes read."""

    MARKED_TO_UNROLL = 1
    UNROLLABLE = 2
    ROTATE_PSUM_AND_SB = 9
    ROTATE_SB_ONLY = 10
    ROTATE_DRAM = 11
    KERNEL_SCOPE = 12
    UNROLLED = 16


class FnKind:
    NORMAL = 0
    NKI = 2


# AddressRotationScope of an InstNKIKernel call site.
ROTATION_SCOPES = {"None": 0, "Kernel": 1, "Global": 2}

# AluOpType names, ordinals 0..32 (spec §5.5).
ALU_OP_NAMES: tuple[str, ...] = (
    "bypass", "bitwise_not", "arith_shift_left", "arith_shift_right", "add", "subtract", "mult",
    "divide", "max", "min", "bitwise_and", "bitwise_or", "bitwise_xor", "logical_and",
    "logical_or", "logical_xor", "logical_shift_left", "logical_shift_right", "is_equal",
    "not_equal", "is_gt", "is_ge", "is_lt", "is_le", "average", "elemwise_mul", "pow", "mod",
    "rsqrt", "abs", "abs_max", "abs_min", "mod_int",
)

ACTIVATION_FUNC_NAMES: tuple[str, ...] = (
    "Identity", "Copy", "Exp", "Relu", "Gelu", "Gelu_apprx_tanh", "Sigmoid", "Silu", "Tanh",
    "Sqrt", "Rsqrt", "Reciprocal", "Square", "Ln", "Sin", "Arctan", "Erf", "Softplus", "Mish",
    "Lrelu", "Prelu", "Sign", "Is_finite", "MemsetZero", "Abs", "Abs_reciprocal_sqrt", "Dsqrt",
    "Ln_prime", "Unknown",
)

ACCUMULATION_NAMES: tuple[str, ...] = (
    "Idle", "Zero", "Accumulate", "ZeroAccumulate", "AddAccumulate", "LoadAccumulate",
)
