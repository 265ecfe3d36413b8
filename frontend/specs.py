"""Input tensor specifications as users type them: ``f32[128,512]``, ``bfloat16[4, 128, 64]``."""

from __future__ import annotations

import re
from dataclasses import dataclass

from tusk.ir.errors import UsageError

# NKI dtype name -> KLR Dtype name; the short spellings are what `--input` takes most often
DTYPES: dict[str, str] = {
    "float32": "float32", "f32": "float32", "fp32": "float32",
    "bfloat16": "bfloat16", "bf16": "bfloat16",
    "float16": "float16", "f16": "float16", "fp16": "float16",
    "int64": "int64", "i64": "int64", "uint64": "uint64", "u64": "uint64",
    "int32": "int32", "i32": "int32",
    "int16": "int16", "i16": "int16",
    "int8": "int8", "i8": "int8",
    "uint32": "uint32", "u32": "uint32",
    "uint16": "uint16", "u16": "uint16",
    "uint8": "uint8", "u8": "uint8",
    "bool": "uint8", "bool_": "uint8",  # NKI's nl.bool_ is a byte (np.bool_ / torch.bool masks)
    "float8_e4m3": "float8_e4m3", "fp8_e4m3": "float8_e4m3",
    "float8_e5m2": "float8e5", "fp8_e5m2": "float8e5", "float8e5": "float8e5",
    "float8_e4m3fn": "float8_e4m3fn",
    # MX: packed containers and the E8M0 scale byte (KLR has no E8M0 dtype)
    "float8_e4m3fn_x4": "float8_e4m3fn_x4", "float8_e5m2_x4": "float8_e5m2_x4",
    "float4_e2m1fn_x4": "float4_e2m1fn_x4", "float8_e8m0fnu": "uint8",
}

_SPEC = re.compile(r"^\s*([A-Za-z0-9_]+)\s*\[\s*([0-9][0-9\s,]*)\]\s*$")
MAX_ELEMENTS = 1 << 34  # 16 Gi elements: far beyond any HBM tensor, and it keeps sizes in int64
_MAX_DIGITS = 18  # a dimension past int64 is refused before int() (which raises past 4,300 digits)


@dataclass(frozen=True)
class TensorSpec:
    """A kernel argument's dtype (KLR name) and shape."""

    dtype: str
    shape: tuple[int, ...]

    def __str__(self) -> str:
        return f"{self.dtype}[{','.join(map(str, self.shape))}]"


def parse_tensor_spec(text: str) -> TensorSpec:
    """``f32[128,512]`` -> TensorSpec('float32', (128, 512)); a UsageError says what is wrong."""
    if isinstance(text, TensorSpec):
        return text
    shown = _shown(str(text))
    m = _SPEC.match(str(text))
    if not m:
        raise UsageError(f"input spec {shown}: expected DTYPE[D0,D1,...], e.g. f32[128,512]")
    name, dims = m.group(1).lower(), m.group(2)
    if name not in DTYPES:
        raise UsageError(f"input spec {shown}: unknown dtype {m.group(1)!r} "
                         f"(one of {', '.join(sorted(set(DTYPES.values())))})")
    parts = [p.strip() for p in dims.split(",")]
    if any(not p for p in parts):
        raise UsageError(f"input spec {shown}: an empty dimension")
    if any(not p.isdigit() for p in parts):
        raise UsageError(f"input spec {shown}: dimensions are separated by commas, e.g. f32[128,512]")
    if any(len(p.lstrip("0")) > _MAX_DIGITS for p in parts):
        raise UsageError(f"input spec {shown}: a dimension of more than {_MAX_DIGITS} digits "
                         f"(at most {MAX_ELEMENTS} elements in all)")
    shape = tuple(int(p) for p in parts)
    if any(d <= 0 for d in shape):
        raise UsageError(f"input spec {shown}: every dimension must be at least 1")
    total = 1
    for d in shape:
        total *= d
    if total > MAX_ELEMENTS:
        raise UsageError(f"input spec {shown}: {total} elements is more than Tusk traces ({MAX_ELEMENTS})")
    return TensorSpec(DTYPES[name], shape)


def _shown(text: str, limit: int = 60) -> str:
    """The spec as an error message quotes it: a hostile 5,000-digit spec is cut, not echoed whole."""
    return repr(text) if len(text) <= limit else repr(text[:limit]) + f"... ({len(text)} characters)"
