"""Loading the backend's input, an ``LncKernel``, and walking it.

:func:`load_lnc_kernel` applies the checks KLR's ``load_test`` makes on top
of the deserializer (version 0.0.12, Contents ``lnc``), with the backend's
wording at the start of each message.  The small helpers after it are what
later passes (listing, KLR -> BIR codegen) need to look inside operators.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any, Iterator

from tusk.ir.errors import FormatError, InputError
from tusk.ir.klr import types as T
from tusk.ir.klr.reader import read_header, read_klr
from tusk.ir.klr.schema import FORMAT_VERSION, LNC_CONTENTS, SCHEMA, ListOf, OptionOf, Ref

#: The KLR commit whose format Tusk reads and writes (KLR still writes header 0.0.12, 390 commits past that tag).
KLR_COMMIT = "7ccd18c"
GENERATION = (f"Tusk reads the format of KLR commit {KLR_COMMIT} (header 0.0.12, contents lnc); other KLR "
              "generations write other formats under the same or another header")


def load_lnc_kernel(path: str | os.PathLike) -> Any:
    """Read a ``.klr`` file and return its ``LncKernel``.

    Raises TuskError ``fail to locate KLIR artifact`` when the file cannot be
    opened, FormatError ``Wrong KLR version`` unless the header says 0.0.12
    (checked before the rest is decoded, as ``load_test`` does), FormatError
    ``Wrong KLIR content type`` unless the Contents is ``lnc``, and the
    reader's FormatError for malformed bytes.
    """
    name = os.fspath(path)
    try:
        with open(name, "rb") as fh:
            data = fh.read()
    except OSError as e:
        raise InputError(f"fail to locate KLIR artifact {name} ({e.strerror or e})") from None
    header = read_header(data, file=name)
    version = (header.major, header.minor, header.patch)
    if version != FORMAT_VERSION:
        raise FormatError(
            f"Wrong KLR version {'.'.join(map(str, version))} "
            f"(expecting {'.'.join(map(str, FORMAT_VERSION))}): written by "
            f"{'an older' if version < FORMAT_VERSION else 'a newer'} KLR; {GENERATION}",
            file=name,
        )
    try:
        contents = read_klr(data, file=name).contents
    except FormatError as e:  # the header was right: a damaged file, or one of another generation
        raise FormatError(f"{e.message} (a damaged file, or one written by another KLR generation: {GENERATION})",
                          file=e.file, where=e.where) from None
    if contents.klr_ctor != LNC_CONTENTS:
        raise FormatError(
            f"Wrong KLIR content type {contents.klr_ctor} (C++ tag {contents.klr_index + 1}; "
            f"expecting lnc, C++ tag 4)"
            + f": perhaps written by another KLR generation (the PyPI release klr-lang 0.0.12 writes another "
              f"content type); {GENERATION}",
            file=name,
        )
    return contents.kernel


def tensor_of(ref: Any) -> Any | None:
    """The TensorName a ``TensorRef.abstract`` (or an ``Access``) refers to.

    None for the physical views (``TensorRef.sbuf/psum/hbm``) and registers,
    which carry no TensorName.
    """
    if isinstance(ref, T.TensorRef_abstract):
        ref = ref.access
    if isinstance(ref, T.Access_simple):
        return ref.tensor
    if isinstance(ref, (T.Access_basic, T.Access_pattern, T.Access_birPattern)):
        return ref.access.tensor
    return None


def iter_operators(kernel: Any, core: int = 0) -> Iterator[tuple[str, Any]]:
    """Yield ``(block_label, stmt)`` for every statement of one logical core.

    `kernel` is an ``LncKernel`` (one body per core) or a single-core ``Kernel``.
    ``stmt.op`` is the ``Operator`` value, ``stmt.op.op`` its payload.
    """
    blocks = kernel.body if isinstance(kernel, T.Kernel) else kernel.bodies[core]
    for block in blocks:
        for stmt in block.body:
            yield block.label, stmt


def tensor_operands(payload: Any) -> Iterator[tuple[str, Any]]:
    """Yield ``(field_name, TensorRef)`` for each tensor operand of an operator payload.

    Looks at fields declared ``TensorRef``, ``Option[TensorRef]`` or
    ``List[TensorRef]`` (in field order; absent options are skipped).
    Operands of type ``Operand`` are not included; see ``Operand.tile``.
    """
    for f in SCHEMA[payload.klr_type].data_fields:
        t, v = f.type, getattr(payload, f.name)
        if isinstance(t, OptionOf) and t.item == Ref("TensorRef"):
            if v is not None:
                yield f.name, v
        elif isinstance(t, ListOf) and t.item == Ref("TensorRef"):
            for item in v:
                yield f.name, item
        elif t == Ref("TensorRef"):
            yield f.name, v


def payload_fields(payload: Any) -> list[tuple[str, Any]]:
    """``(name, value)`` for every field of a payload, in wire order."""
    return [(f.name, getattr(payload, f.name)) for f in dataclasses.fields(payload)]
