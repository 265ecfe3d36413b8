"""How a document spelled what Tusk models: the wire patch that makes BIR-JSON round trips lossless.

Tusk writes every object of a module in one *policy* spelling (what the
real-dump tools read, ``docs/bir-json.md``).  A document read from elsewhere
may spell the same program differently: keys left out (KLR's loop record has
no ``name``, ``engine``, ``ins``, ``outs``), other forms (``attributes`` as a
list, a dependency as a bare name, DRAM ``dims`` as ``[128, 2048]``), values a
reader normalises (``bank`` of an SB location).

The reader renders each object it built in the policy spelling and compares
it with the document's object, key by key, for the keys Tusk models.  Where
they differ it stores a *patch* in the object's own record (an instruction's
``attrs``, an operand's, memory location's, set's or block's ``extra``, a
function's or module's ``extras``) under the reserved key :data:`WIRE`::

    {key: (raw, policy)}      raw / policy: () when the key is absent, else (value,)

The writer renders the policy spelling again and, for each patched key whose
policy value is still the one recorded, writes the document's value instead
(or leaves the key out).  A pass that changes what the key means changes the
policy value, so its change is written; nothing else is lost.  Rows a pass
creates have no patch and are written in the policy spelling.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

from tusk.ir.canonical import canonical_json
from tusk.ir.columns import Record, freeze, thaw

#: The reserved record key holding an object's patch (a key no JSON document can use unnoticed: the
#: reader refuses documents that contain it).
WIRE = "\u0000wire"

_MISSING = object()


def same(a: Any, b: Any) -> bool:
    """JSON equality that tells apart what Python merges (1, 1.0, True)."""
    if a is b:
        return True
    try:
        return canonical_json(thaw(a), allow_nan=True) == canonical_json(thaw(b), allow_nan=True)
    except (TypeError, ValueError, RecursionError):
        return False


def diff(raw: Mapping[str, Any], policy: Mapping[str, Any], keys: Iterable[str]) -> dict[str, tuple]:
    """The patch entries of ``keys`` where the document (``raw``) and the policy rendering differ."""
    out: dict[str, tuple] = {}
    for k in keys:
        r = raw.get(k, _MISSING)
        p = policy.get(k, _MISSING)
        if r is _MISSING and p is _MISSING:
            continue
        if r is not _MISSING and p is not _MISSING and same(r, p):
            continue
        out[k] = (() if r is _MISSING else (r,), () if p is _MISSING else (p,))
    return out


def with_patch(rec: Mapping[str, Any] | None, patch: Mapping[str, tuple]) -> Record:
    """``rec`` with ``patch`` merged into its WIRE entry (later entries win)."""
    data = dict(rec or {})
    if patch:
        old = dict(data.get(WIRE) or {})
        old.update({k: (tuple(r), tuple(p)) for k, (r, p) in patch.items()})
        data[WIRE] = old
    return Record.of(data)


def split(rec: Mapping[str, Any] | None) -> tuple[dict[str, Any], Mapping[str, Any] | None]:
    """(the record's keys without WIRE, its patch or None)."""
    if not rec:
        return {}, None
    if WIRE not in rec:
        return dict(rec), None
    data = dict(rec)
    return data, data.pop(WIRE)


def apply(d: dict[str, Any], patch: Mapping[str, Any] | None) -> dict[str, Any]:
    """Apply a patch to a policy rendering ``d`` (in place; also returned)."""
    if not patch:
        return d
    for k, (raw, pol) in patch.items():
        cur = d.get(k, _MISSING)
        if pol:
            if cur is _MISSING or not same(cur, pol[0]):
                continue  # a pass changed it: write the new value
        elif cur is not _MISSING:
            continue
        if raw:
            d[k] = thaw(raw[0])
        else:
            d.pop(k, None)
    return d


def patched_keys(rec: Mapping[str, Any] | None) -> frozenset:
    if not rec or WIRE not in rec:
        return frozenset()
    return frozenset(rec[WIRE])


def frozen_patch(patch: Mapping[str, tuple]) -> Record:
    return Record.of({k: (freeze(tuple(r)), freeze(tuple(p))) for k, (r, p) in patch.items()})
