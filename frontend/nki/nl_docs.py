"""The ``nl`` API table of docs/frontend.md, made from the code (tests/test_frontend_language_docs.py compares)."""

from __future__ import annotations

import inspect

from tusk.frontend.nki import language as nl
from tusk.frontend.tensors import View

# names that are values, not calls: listed in one row each group
_VALUE_GROUPS = {
    "dtypes": ("float32", "bfloat16", "float16", "tfloat32", "int64", "int32", "int16", "int8", "uint64", "uint32", "uint16", "uint8",
               "bool_", "float8_e4m3", "float8_e4m3fn", "float8_e5m2"),
    "buffers": ("sbuf", "psum", "hbm", "shared_hbm", "private_hbm"),
}
_SKIP = {"tensor", "NkiTensor", "tile_size", "fp32", "fp16", "bf16", "mgrid", "Affine", "LoopVar", "Mask", "MGrid",
         "IndexVector", "Tensor", "View", "Dtype", "ParDim", "TraceError", "Any", "current", "current_user_line",
         "unsupported", "as_shape", "as_dtype", "loop_index", "merge_contiguous", "always", "written_before"}
_VIEW_METHODS = ("ap", "permute", "broadcast", "broadcast_to", "expand_dim", "squeeze_dim", "reshape",
                 "reshape_dim", "flatten_dims", "rearrange", "slice", "select", "vector_select", "get_pattern", "is_contiguous", "view",
                 "astype", "expand_dims", "assert_shape")


def _signature(fn) -> str:
    """``(x, y, dtype=None, mask=None)``: parameter names and defaults (dtypes by their nl name)."""
    parts, star = [], False
    for p in inspect.signature(fn).parameters.values():
        if p.name == "self" or p.kind is p.VAR_KEYWORD:
            continue
        if p.kind is p.VAR_POSITIONAL:
            parts.append("*" + p.name)
            star = True
            continue
        if p.kind is p.KEYWORD_ONLY and not star:
            parts.append("*")
            star = True
        parts.append(p.name if p.default is p.empty else f"{p.name}={p.default!r}")
    return "(" + ", ".join(parts) + ")"


# what a call records, for calls whose docstring does not say it
_LOWERING = {
    "load": "`ncDmaCopy` HBM→SBUF (`data[idx_tile, ...]`: a gather by a vector offset); a `dtype` adds an `ncCopy`",
    "store": "`ncDmaCopy` SBUF/PSUM→HBM (a scatter through an index tile); a dtype conversion first if needed",
    "copy": "`ncCopy`", "transpose": "`ncMatMul` by the identity, into PSUM (≤ 128 columns)",
    "matmul": "`ncMatMul` into PSUM (plus a PE transpose of `x` without `transpose_x`); K, M ≤ 128, N ≤ 512",
    "sum": "`tensorReduce` add over any free axes (the source walks them innermost)",
    "max": "`tensorReduce` max over any free axes", "min": "`tensorReduce` min over any free axes",
    "prod": "`tensorReduce` mult over any free axes", "mean": "`tensorReduce` add + `tensorScalar` mult 1/n",
    "all": "`tensorScalar` not_equal 0 + `tensorReduce` min", "abs": "`ncActivate` abs",
    "abs_max": "the input of larger magnitude, its sign kept: `ncActivate` abs of each side, `tensorTensor` "
               "is_gt, `copyPredicated`",
    "abs_min": "the input of smaller magnitude, its sign kept: as `nl.abs_max` with is_lt",
    "fmod": "`sign(x) * mod(|x|, |y|)`: the remainder with the dividend's sign, exactly",
    "negative": "`tensorScalar` mult -1", "reciprocal": "`reciprocal`", "invert": "`tensorScalar` bitwise_not",
    "left_shift": "`tensorScalar` logical_shift_left by an int; `tensorTensor` by a tile of counts",
    "right_shift": "`tensorScalar` arith_shift_right (signed) / logical_shift_right (unsigned) by an int; "
                   "`tensorTensor` by a tile of counts",
    "logical_not": "`tensorScalar` is_equal 0",
    "ndarray": "a tensor: HBM, or an SBUF/PSUM tile placed by Tusk (`address=` is ignored)",
    "full": "`memSet` of an on-chip tile; in HBM, of one SBUF tile then `ncDmaCopy` over the tensor",
    "zeros": "`memSet` 0 (in HBM as `nl.full`)", "ones": "`memSet` 1 (in HBM as `nl.full`)",
    "zeros_like": "`memSet` 0", "ones_like": "`memSet` 1", "full_like": "`memSet`",
    "empty_like": "a tensor of the same shape, dtype and buffer", "broadcast_to": "as `tile.broadcast_to`",
    "expand_dims": "a view with a unit axis", "dropout": "`dropout` (DropRate: `rate` is the drop probability)",
    "random_seed": "`setRngSeed` from a [1, 1] tile", "loop_reduce": "`acc[...] = nl.loop_reduce(x, op, ...)`: "
    "`tensorTensor` acc = acc op x; an acc nothing wrote starts from op's identity (add, multiply, max, min)",
    "affine_range": "a dynamic loop (body traced once); an index used as a Python int unrolls it",
    "sequential_range": "as `nl.affine_range`", "dynamic_range": "as `nl.affine_range` (int bounds); a register bound: a KLR loop whose index is "
                     "a register",
    "static_range": "unrolled while tracing",
    "while_loop": "a loop of blocks testing a condition register before each iteration (the body returns the "
                  "next one)",
    "arange": "an index vector for subscripts and masks", "par_dim": "marks the partition axis of a tile shape",
    "program_id": "a constant per SPMD program instance", "num_programs": "the grid's extent",
    "program_ndim": "the grid's rank", "is_hbm": "", "is_on_chip": "", "is_psum": "", "is_sbuf": "",
}


def _summary(fn) -> str:
    if fn.__name__ in _LOWERING and fn.__module__ != "tusk.frontend.tensors":
        return _LOWERING[fn.__name__]
    doc = inspect.getdoc(fn) or ""
    return doc.splitlines()[0].replace("|", "\\|") if doc else ""


def api_table() -> str:
    rows = ["| call | signature | what it records |", "|---|---|---|"]
    for name in sorted(n for n in dir(nl) if not n.startswith("_") and n not in _SKIP):
        obj = getattr(nl, name)
        if inspect.isfunction(obj) and obj.__module__.startswith("tusk.frontend.nki"):
            rows.append(f"| `nl.{name}` | `{_signature(obj)}` | {_summary(obj)} |")
    for name in _VIEW_METHODS:
        fn = getattr(View, name)
        rows.append(f"| `tile.{name}` | `{_signature(fn)}` | {_summary(fn)} |")
    for group, names in _VALUE_GROUPS.items():
        rows.append(f"| {group} | {' '.join(f'`nl.{n}`' for n in names)} | |")
    fixed = {k: v for k, v in vars(nl.tile_size).items() if not k.startswith("_")}
    sbuf = {k: getattr(nl.tile_size, k) for k in nl._SBUF_SIZES}  # the default architecture's (gen3)
    sizes = " ".join(f"`{k}`={v}" for k, v in {**fixed, **sbuf}.items()) + " (SBUF sizes: the traced architecture's)"
    rows.append(f"| `nl.tile_size` | {sizes} | |")
    return "\n".join(rows) + "\n"
