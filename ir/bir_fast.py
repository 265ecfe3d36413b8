"""Columnar BIR-JSON: the writer's and the loader's bulk paths (placeholder, filled in below)."""

from __future__ import annotations

from typing import Any

from tusk.ir.module import Function, Module


def write_blocks(fn: Function, render: Any, out: Any) -> None:
    from tusk.ir.bir_json import _dump

    children: dict[int, list[int]] = {}
    for b, parent in enumerate(fn.blocks["parent"].tolist()):
        if parent >= 0:
            children.setdefault(parent, []).append(b)
    rows = fn.block_rows()

    def blocks(bs: list[int]) -> None:
        out.write(b"[")
        for k, b in enumerate(bs):
            out.write(b",\n" if k else b"\n")
            head, patch = _block_head(fn, b)
            text = _dump(head)
            before, after = text.split(_SPLICE_JSON)
            out.write(before)
            out.write(b"[")
            for j, i in enumerate(rows[b].tolist()):
                out.write(b",\n" if j else b"\n")
                d = render.inst(i)
                if i in children:
                    d["blocks"] = _SPLICE
                    before_i, after_i = _dump(d).split(_SPLICE_JSON)
                    out.write(before_i)
                    blocks(children[i])
                    out.write(after_i)
                else:
                    out.write(_dump(d))
            out.write(b"\n]")
            out.write(after)
        out.write(b"\n]")

    blocks(fn.top_blocks())


def _block_head(fn: Function, b: int) -> tuple[dict, Any]:
    from tusk.ir import wire
    from tusk.ir.bir_json import _SPLICE, jsonable

    d, patch = wire.split(fn.record(fn.blocks.get("extra", b)))
    d = jsonable(d)
    d["name"] = fn.strings[fn.blocks.get("name", b)]
    d["instructions"] = _SPLICE
    if patch:
        wire.apply(d, {k: v for k, v in patch.items() if k != "instructions"})
    return d, patch


def try_load(path: str) -> Module | None:
    return None


from tusk.ir.bir_json import _SPLICE, _SPLICE_JSON  # noqa: E402
