"""Keys you can trust: canonical JSON digested with SHA-256.

Every key is the digest of a dict of *named parts*, each computed by its
owner (the pass supplies name, version and options; the store supplies the
input's content hash; the build supplies the digests of the files a kernel
reads and the settings that affect output).  Nothing here uses ``hash()``,
``id()`` or a ``repr`` of an unordered container, so keys are the same in
every process and on every machine.  A value that cannot be put into
canonical form raises :class:`Uncacheable`; callers then fall towards a miss
(a fresh key that never hits), never towards a stable wrong key.
"""

from __future__ import annotations

import dataclasses
import hashlib
import inspect
import math
import os
from typing import Any

from tusk.ir.canonical import canonical_bytes

KEY_FORMAT = 1  # bump to invalidate every action record at once


class Uncacheable(TypeError):
    """A key part has no canonical form."""


def _normalise(obj: Any) -> Any:
    if obj is None or isinstance(obj, (bool, str)):
        return obj
    if isinstance(obj, int):
        return int(obj)
    if isinstance(obj, float):
        if math.isnan(obj) or math.isinf(obj):
            return {"float": repr(obj)}
        return obj
    if isinstance(obj, (list, tuple)):
        return [_normalise(x) for x in obj]
    if isinstance(obj, dict):
        out = {}
        for k, v in obj.items():
            if not isinstance(k, str):
                raise Uncacheable(f"key part has a non-string key {k!r}")
            out[k] = _normalise(v)
        return out
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {"dataclass": type(obj).__qualname__,
                "fields": {f.name: _normalise(getattr(obj, f.name)) for f in dataclasses.fields(obj)}}
    try:
        import numpy as np

        if isinstance(obj, np.generic):
            return _normalise(obj.item())
    except ImportError:  # pragma: no cover
        pass
    raise Uncacheable(f"cannot put {type(obj).__name__} value {obj!r} into a cache key")


def canonical(obj: Any) -> bytes:
    """Canonical JSON bytes: sorted keys, no spaces, floats by repr, tuples as lists."""
    return canonical_bytes(_normalise(obj), allow_nan=False)


def digest(obj: Any) -> str:
    return hashlib.sha256(canonical(obj)).hexdigest()


def action_key(parts: dict[str, Any]) -> str:
    """The key of one action: (pass, version, code, options, input hash, files, env) digested."""
    return digest({"tusk-action": KEY_FORMAT, **parts})


def file_digest(path: str | os.PathLike) -> str:
    """SHA-256 of a file's bytes, or ``"missing"`` (a missing file is part of the key too)."""
    h = hashlib.sha256()
    try:
        with open(path, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
    except OSError:
        return "missing"
    return h.hexdigest()


# The code every pass can run: all of it is in each key (Triton hashes its whole compiler package).
CODE_PACKAGES = ("tusk.ir", "tusk.stages", "tusk.sim")
_CODE_DIGESTS: dict[str, str] = {}


def package_digest(packages: tuple[str, ...] = CODE_PACKAGES) -> str:
    """SHA-256 over every source file of ``packages`` (relative path and bytes, sorted) and the store
    format, computed once per process."""
    memo = ",".join(packages)
    if memo not in _CODE_DIGESTS:
        import importlib
        from pathlib import Path

        from tusk.ir.serial import FORMAT_VERSION

        h = hashlib.sha256(f"store-format:{FORMAT_VERSION}".encode())
        for name in packages:
            for root in importlib.import_module(name).__path__:
                for path in sorted(Path(root).rglob("*.py")):
                    h.update(f"\0{name}/{path.relative_to(root).as_posix()}\0".encode())
                    h.update(path.read_bytes())
        _CODE_DIGESTS[memo] = h.hexdigest()
    return _CODE_DIGESTS[memo]


def code_digest(cls: type) -> str:
    """Digest of all code pass ``cls`` can run: every source file of tusk.ir, tusk.stages and
    tusk.sim, the store format, and -- for a pass defined elsewhere (a pipeline plugin) -- its own file.

    A pass's ``version`` is the contract; this is the safety net for the
    common slip of editing a pass or one of its helpers without bumping it.
    """
    module = getattr(cls, "__module__", "") or ""
    if module.startswith(tuple(p + "." for p in CODE_PACKAGES)):
        return package_digest()
    try:
        src = inspect.getsourcefile(cls)
        own = file_digest(src) if src else "unknown"
    except (TypeError, OSError):
        own = "unknown"
    return hashlib.sha256(f"{package_digest()}:{own}".encode()).hexdigest()
