"""Canonical JSON: the one spelling of a JSON value that identities, digests and keys are built on.

Sorted keys, no spaces, UTF-8 as is.  Every digest of Tusk (module content
hashes, action keys, record checksums) and the equality of attribute
records go through :func:`canonical_json`, so the same value always has the
same bytes.
"""

from __future__ import annotations

import json
from typing import Any, Callable


def canonical_json(obj: Any, default: Callable[[Any], Any] | None = None, allow_nan: bool = True) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=default,
                      allow_nan=allow_nan)


def canonical_bytes(obj: Any, default: Callable[[Any], Any] | None = None, allow_nan: bool = True) -> bytes:
    return canonical_json(obj, default, allow_nan).encode()


def content_checksum(kind: str, key: str, content: dict) -> str:
    """The digest a cache record or note carries of its own key and content (everything but its
    ``checksum`` field): an edit or a record moved to another key is detected.  Here, beside the canonical
    form it hashes, so that a reader that must not import the store (``tusk.workflows.reuse``) checks it
    the same way.  Not a signature: whoever can write the store can recompute it (docs/architecture.md)."""
    import hashlib

    body = {k: v for k, v in content.items() if k != "checksum"}
    return hashlib.sha256(f"{kind}:{key}:".encode() + canonical_bytes(body)).hexdigest()
