"""``nki.typing`` / ``neuronxcc.nki.typing``: the annotations kernels write (``x: nt.tensor[64, 512]``).

Annotations are evaluated when a kernel file runs (``def k(a: nt.tensor)``
and ``t: tensor[n, m] = ...`` in a function body is not, but a module-level
one is), so each name here must accept the subscripts kernels give it; the
front end reads no meaning from them: shapes and dtypes come from the traced
values.
"""

from __future__ import annotations

import re
from typing import Any

from tusk.frontend.nki import language as _nl


class _Annotation:
    """``tensor``, ``tensor[64, 512]``, ``tensor[64, 512, nl.float32]``: a marker that indexes to itself."""

    def __init__(self, name: str, args: tuple = ()):
        self._name, self._args = name, args

    def __getitem__(self, item: Any) -> _Annotation:
        return _Annotation(self._name, item if isinstance(item, tuple) else (item,))

    def __call__(self, *_: Any, **__: Any) -> Any:
        from tusk.frontend.errors import unsupported
        raise unsupported(f"calling nki.typing.{self._name} (it is an annotation)")

    def __repr__(self) -> str:
        return f"nt.{self._name}" + (f"[{', '.join(map(repr, self._args))}]" if self._args else "")

    def __instancecheck__(self, value: Any) -> bool:
        """``isinstance(x, nt.tensor)``, as kernels check their arguments: a traced tensor or view of one (a
        number for ``nt.scalar``)."""
        if self._name == "scalar":
            import numbers

            return isinstance(value, numbers.Number) and not isinstance(value, bool)
        from tusk.frontend.tensors import Tensor, View

        return isinstance(value, (Tensor, View))


tensor = _Annotation("tensor")
mutable_tensor = _Annotation("mutable_tensor")
mutable = _Annotation("mutable")  # `nt.tensor[nt.mutable]`: an argument written in place (frontend.trace)


_MUTABLE_TEXT = re.compile(r"\bmutable(_tensor)?\b")


def declares_mutable(note: Any) -> bool:
    """Is the annotation ``note`` an in/out argument's: ``nt.mutable``, ``nt.mutable_tensor``, or a subscript
    naming one (``nt.tensor[nt.mutable]``, ``nt.mutable_tensor[128, 64]``)?  A string (an annotation
    ``from __future__ import annotations`` left unevaluated) is read for the name."""
    if isinstance(note, str):
        return _MUTABLE_TEXT.search(note) is not None
    if not isinstance(note, _Annotation):
        return False
    return note._name in ("mutable", "mutable_tensor") or any(declares_mutable(a) for a in note._args)
scalar = _Annotation("scalar")

# dtypes, as nki.typing re-exports them (`nt.float8_e4m3`)
float32, bfloat16, float16 = _nl.float32, _nl.bfloat16, _nl.float16
int32, int16, int8 = _nl.int32, _nl.int16, _nl.int8
uint32, uint16, uint8 = _nl.uint32, _nl.uint16, _nl.uint8
tfloat32, float8_e4m3, float8_e5m2 = _nl.tfloat32, _nl.float8_e4m3, _nl.float8_e5m2
