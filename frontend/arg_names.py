"""``--arg`` values that name what a kernel's callers pass by name: ``op0=nl.add``, ``compare_op0=np.less``,
``reduce_cmd=nisa.reduce_cmd.load_reduce``, ``imm=-inf``.

Only attribute paths of numpy and of Tusk's own ``nki.language`` / ``nki.isa`` are looked up (never
executed, never imported from elsewhere); a path that names nothing is left to the caller (a string)."""

from __future__ import annotations

import math
from typing import Any

_FLOATS = {"inf": math.inf, "+inf": math.inf, "-inf": -math.inf, "nan": math.nan}
_MISSING = object()


def _roots() -> dict[str, Any]:
    import numpy

    from tusk.frontend.nki import isa, language
    return {"np": numpy, "numpy": numpy, "nl": language, "nki.language": language, "nisa": isa,
            "nki.isa": isa}


def named_value(text: str) -> Any:
    """The value ``text`` names, or ``_MISSING`` (see :func:`lookup`)."""
    s = text.strip()
    if s.lower() in _FLOATS:
        return _FLOATS[s.lower()]
    for prefix in sorted(_roots(), key=len, reverse=True):
        if s.startswith(prefix + "."):
            return _walk(_roots()[prefix], s[len(prefix) + 1:].split("."))
    return _MISSING


def _walk(obj: Any, parts: list[str]) -> Any:
    for part in parts:
        if not part.isidentifier() or part.startswith("_"):
            return _MISSING
        try:
            obj = getattr(obj, part)
        except Exception:  # noqa: BLE001 - Tusk's nki modules refuse unknown names with their own error
            return _MISSING
    return obj


def lookup(text: str) -> tuple[bool, Any]:
    """(True, value) when ``text`` names a numpy / nl / nisa attribute or an infinity; (False, None) else."""
    v = named_value(text)
    return (False, None) if v is _MISSING else (True, v)
