"""``nl.gather_flattened(data, indices)``: in every partition, ``data``'s free dims flattened and indexed by
``indices`` (the result has ``indices``' shape): the GpSimd per-partition gather (KLR ncNGather)."""

from __future__ import annotations

from typing import Any

from tusk.frontend.errors import unsupported
from tusk.frontend.nki import isa_ops as ops
from tusk.frontend.nki import language as nl
from tusk.frontend.tensors import View, as_dtype
from tusk.frontend.tracer import current


def gather_flattened(data: Any, indices: Any, axis: Any = 0, dtype: Any = None, mask: Any = None,
                     **kw: Any) -> View:
    nl._no_keywords("nl.gather_flattened", kw)
    call = "nl.gather_flattened"
    if axis not in (0, None):
        raise unsupported(f"{call} axis={axis!r} (the free dims of every partition, flattened: axis=0)")
    if mask is not None:
        raise unsupported(f"{call} mask={mask!r}")
    d, i = nl._tile(data, f"{call} data"), nl._tile(indices, f"{call} indices")
    if "int" not in i.dtype:
        raise unsupported(f"{call} of {i.dtype} indices (integers)")
    out = current().tile(i.shape, as_dtype(dtype) if dtype is not None else d.dtype)
    ops.n_gather(call, out, d, i)
    return out
