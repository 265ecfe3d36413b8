"""Content-addressed module store (Zarr objects, JSON action records).

``Store(location)`` opens a store at a path or fsspec URL; see
:mod:`cache.store` for the layout and guarantees, :mod:`cache.objects` for
the object format and :mod:`cache.keys` for the key scheme.  Nothing in
``cache/`` knows about passes beyond the key parts it is given.
"""

from tusk.cache.keys import Uncacheable, action_key, canonical, code_digest, digest, file_digest
from tusk.cache.objects import ObjectDamaged
from tusk.cache.store import ObjectMissing, Store, open_store, parse_size

__all__ = ["ObjectDamaged", "ObjectMissing", "Store", "Uncacheable", "action_key", "canonical", "code_digest",
           "digest", "file_digest", "open_store", "parse_size"]
