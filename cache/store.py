"""The content-addressed store: module objects, action records, small notes.

Layout under the store root (a path or an fsspec URL)::

    TUSK_STORE.json                 marks the directory as a store (``clear`` refuses other dirs)
    objects/<h[:2]>/<h>/            one module as a Zarr group, named by ir.serial.content_hash
    actions/<k[:2]>/<k>.json        action record: key -> output hash, stats, timings, key parts
                                    (or, kind "failure", the error a pass deterministically raised)
    notes/<kind>/<k[:2]>/<k>.json   small memos (e.g. a kernel file's interface by file digest)
    tmp/                            objects being written (local stores), renamed into objects/
    trash/                          directories being deleted
    dask-scratch/                   scratch space of local Dask workers (``tusk compile``)

Guarantees:

* **Atomic writes.**  A local object is written into ``tmp/`` and published
  with one ``rename``; a record is written aside and moved with
  ``os.replace``.  When two processes write the same object the second
  rename fails and its copy is dropped: content addressing makes both
  copies identical.
* **Verified reads.**  :meth:`Store.load` decodes an object and checks that
  its content hashes to its name; a damaged or unfinished object is moved
  out of the way and reported as a miss (:class:`ObjectDamaged`), so it is
  recomputed, never returned.  An action record whose output object is
  missing is a miss.  :meth:`Store.has` only reads an object's head, so a
  write trusts an object already there unless asked to ``check`` it (or
  this process found it damaged): then a damaged one is replaced.
* **Maintenance only on stores.**  ``clear``, ``gc`` and ``verify
  --remove`` refuse a non-empty directory without the store marker.
* **No pickle.**  Objects are arrays and JSON (``ir.serial``); records are
  JSON.  Reading a shared store never runs code.
"""

from __future__ import annotations

import json
import os
import re
import time
from dataclasses import dataclass, field
from typing import Any, Iterator

from tusk.cache.fs import FsspecFS, LocalFS, open_fs
from tusk.cache.objects import ObjectDamaged, ObjectOutdated, parse_head, read_object, write_parts
from tusk.ir.canonical import content_checksum as _checksum
from tusk.ir.errors import EnvError, UsageError
from tusk.ir.module import Module

STORE_FORMAT = 1
RECORD_FORMAT = 2  # 2: records and notes carry a checksum of their key and content
MARKER = "TUSK_STORE.json"
_HEX = re.compile(r"^[0-9a-f]{16,128}$")
TMP_GRACE = 3600.0  # seconds: tmp/ leftovers younger than this may belong to a running writer


class StoreRefused(UsageError):
    """The directory given as the store is not one, and cannot become one (it holds other data)."""


class ObjectMissing(EnvError):
    """No complete object of that hash is in the store."""


@dataclass(frozen=True)
class Saved:
    """What :meth:`Store.save` did: the hash, seconds spent hashing and writing, whether it wrote."""

    hash: str
    hash_seconds: float
    write_seconds: float
    written: bool


@dataclass
class StoreCounters:
    """What this process did to the store (tests and the report read these)."""

    objects_written: int = 0
    objects_read: int = 0
    damaged: list[str] = field(default_factory=list)


class Store:
    """A content-addressed module store with action records (see the module docstring)."""

    def __init__(self, location: str | os.PathLike):
        self.fs: LocalFS | FsspecFS = open_fs(location)
        self.url = self.fs.url
        self.counters = StoreCounters()
        self._rooted = False
        self._damaged: set[str] = set()  # objects this process found damaged: never trusted by put

    def __repr__(self) -> str:
        return f"Store({self.url!r})"

    # ------------------------------------------------------------ paths
    def object_path(self, h: str) -> str:
        _check_name(h)
        return self.fs.path("objects", h[:2], h)

    def action_path(self, key: str) -> str:
        _check_name(key)
        return self.fs.path("actions", key[:2], f"{key}.json")

    def note_path(self, kind: str, key: str) -> str:
        _check_name(key)
        if not re.match(r"^[a-z0-9_-]+$", kind):
            raise ValueError(f"bad note kind {kind!r}")
        return self.fs.path("notes", kind, key[:2], f"{key}.json")

    def _ensure_root(self) -> None:
        """Make the root a store before the first write: only a missing or empty directory becomes one."""
        if self._rooted:
            return
        marker = self.fs.path(MARKER)
        if self.fs.read_bytes(marker) is None:
            self._refuse_foreign("making a store of", empty_ok=True)
            self.fs.makedirs(self.fs.root)
            self.fs.write_atomic(marker, json.dumps({"tusk_store": STORE_FORMAT}).encode())
        self._rooted = True

    def open_for_writing(self) -> "Store":
        """Check (and if new, create) the store now, before a build writes anything anywhere."""
        try:
            self._ensure_root()
        except OSError as e:
            raise StoreRefused(f"cannot use {self.url} as the cache: {e.strerror or e}") from None
        return self

    # ------------------------------------------------------------ objects
    def has(self, h: str) -> bool:
        """Cheap check: a complete object named ``h`` is present (content not re-hashed)."""
        raw = self.fs.read_bytes(self.fs.path("objects", h[:2], h, "zarr.json"))
        return parse_head(raw, h) is not None

    def put(self, module: Module, check: bool = False) -> str:
        """Store ``module``; returns its content hash (nothing is written if it is there already).

        ``check``: re-hash an object already stored under that hash and
        replace it if it is damaged (a head that looks complete proves
        nothing about the rest).
        """
        return self.save(module, check).hash

    def save(self, module: Module, check: bool = False) -> "Saved":
        """:meth:`put` with what it cost: the canonical parts are made and hashed once, then written."""
        from tusk.ir.serial import module_to_parts, parts_hash

        t0 = time.perf_counter()
        parts = module_to_parts(module)
        h = parts_hash(*parts)
        t1 = time.perf_counter()
        written = self.put_hashed(module, h, check, parts)
        return Saved(h, t1 - t0, time.perf_counter() - t1, written)

    def put_hashed(self, module: Module, h: str, check: bool = False, parts: tuple | None = None) -> bool:
        """Store ``module`` under its known hash ``h``; False if it was there already."""
        if self.has(h):
            if not (check or h in self._damaged):
                return False
            reason = self.verify_object(h)
            if reason is None:
                return False
            self._quarantine(h, reason)
        if parts is None:
            from tusk.ir.serial import module_to_parts

            parts = module_to_parts(module)
        self._ensure_root()
        dst = self.object_path(h)
        if not self.fs.atomic_dirs:
            write_parts(self.fs.writer(dst), parts, h)
            self.counters.objects_written += 1
            return True
        if self.fs.exists(dst):
            if self.has(h):  # another process published it since we looked
                return False
            self._quarantine(h, "incomplete object found while writing")  # publishing is atomic: damaged
        tmp = self.fs.temp_dir()
        try:
            write_parts(self.fs.writer(tmp), parts, h)
            if not self.fs.publish_dir(tmp, dst):
                if not self.has(h):  # the one in the way is damaged: replace it once
                    self._quarantine(h, "damaged object found while writing")
                    self.fs.publish_dir(tmp, dst)
                    return True
                return False
            self.counters.objects_written += 1
            return True
        finally:
            self.fs.remove_tree(tmp)

    def load(self, h: str) -> Module:
        """The module named ``h``, verified; raises ObjectMissing or ObjectDamaged.

        A damaged object is removed from the store before ObjectDamaged is
        raised, so whoever catches it can simply recompute.
        """
        dst = self.object_path(h)
        if not self.fs.exists(self.fs.path("objects", h[:2], h, "zarr.json")):
            if self.fs.exists(dst):
                self._quarantine(h, "object has no root metadata")
                raise ObjectDamaged(f"object {h} is damaged: no root metadata")
            raise ObjectMissing(f"object {h} is not in the store {self.url}")
        try:
            module = read_object(self.fs.reader(dst), h)
        except ObjectDamaged as e:
            self._quarantine(h, e.message)
            raise
        self.counters.objects_read += 1
        return module

    def get(self, h: str) -> Module | None:
        """Like :meth:`load`, but a missing or damaged object is simply None (a miss)."""
        try:
            return self.load(h)
        except (ObjectMissing, ObjectDamaged):
            return None

    def verify_object(self, h: str) -> str | None:
        """None if object ``h`` is intact, else the reason (the object is left in place)."""
        problem = self._problem(h)
        return None if problem is None else problem.message

    def _problem(self, h: str) -> ObjectDamaged | None:
        """What reading object ``h`` in full finds wrong with it (an ``ObjectOutdated`` for an older Tusk's)."""
        try:
            read_object(self.fs.reader(self.object_path(h)), h)
        except ObjectDamaged as e:
            return e
        return None

    def discard(self, h: str) -> None:
        self.fs.remove_tree(self.object_path(h))

    def _quarantine(self, h: str, reason: str) -> None:
        """Remove a damaged object; if it cannot be removed, say so (a rebuild could not replace it)."""
        self.counters.damaged.append(h)
        self._damaged.add(h)
        self.fs.remove_tree(self.object_path(h))
        if self.fs.exists(self.object_path(h)):
            raise EnvError(f"damaged object {h} ({reason}) cannot be removed from the store {self.url}; "
                           f"remove {self.object_path(h)} or run tusk cache clear")

    def object_hashes(self) -> Iterator[str]:
        for prefix in self.fs.listdir(self.fs.path("objects")):
            for name in self.fs.listdir(self.fs.path("objects", prefix)):
                if _HEX.match(name):
                    yield name

    # ------------------------------------------------------------ actions
    def get_action(self, key: str) -> dict[str, Any] | None:
        """The record for ``key`` if it is valid and its output object is present, else None."""
        rec = self.read_action(key)
        if rec is None or not isinstance(rec.get("output"), str) or not self.has(rec["output"]):
            return None
        return rec

    def get_failure(self, key: str) -> dict[str, Any] | None:
        """The recorded deterministic failure of action ``key`` (``kind`` "failure"), or None."""
        rec = self.read_action(key)
        if rec is None or rec.get("kind") != "failure" or not isinstance(rec.get("error"), str):
            return None
        return rec

    def read_action(self, key: str) -> dict[str, Any] | None:
        """The parsed record for ``key`` (its output not checked), or None."""
        raw = self.fs.read_bytes(self.action_path(key))
        if raw is None:
            return None
        try:
            rec = json.loads(raw)
        except ValueError:
            return None
        if not isinstance(rec, dict) or rec.get("key") != key or rec.get("format") != RECORD_FORMAT \
                or rec.get("checksum") != _checksum("action", key, rec):
            return None  # damaged or edited: a miss, never trusted
        return rec

    def put_action(self, key: str, record: dict[str, Any]) -> None:
        self._ensure_root()
        rec = json.loads(json.dumps(dict(record, key=key, format=RECORD_FORMAT), default=str))
        rec.setdefault("created", time.time())
        rec["checksum"] = _checksum("action", key, rec)
        self.fs.write_atomic(self.action_path(key), json.dumps(rec, sort_keys=True).encode())

    def touch_action(self, key: str) -> None:
        """Record a use of ``key`` (the LRU clock of ``gc``)."""
        self.fs.touch(self.action_path(key))

    def drop_action(self, key: str) -> None:
        self.fs.remove_file(self.action_path(key))

    def action_keys(self) -> Iterator[str]:
        for prefix in self.fs.listdir(self.fs.path("actions")):
            for name in self.fs.listdir(self.fs.path("actions", prefix)):
                if name.endswith(".json") and _HEX.match(name[:-5]):
                    yield name[:-5]

    # ------------------------------------------------------------ notes
    def get_note(self, kind: str, key: str, touch: bool = True) -> Any:
        """The note's value, or None when it is missing, damaged or edited (a miss).

        ``touch``: a note found is marked as used now (the LRU clock of ``gc``)."""
        path = self.note_path(kind, key)
        raw = self.fs.read_bytes(path)
        if raw is None:
            return None
        try:
            note = json.loads(raw)
        except ValueError:
            return None
        if not isinstance(note, dict) or note.get("checksum") != _checksum(f"note:{kind}", key, note):
            return None
        if touch:
            self.fs.touch(path)
        return note.get("value")

    def put_note(self, kind: str, key: str, value: Any) -> None:
        self._ensure_root()
        note = {"value": json.loads(json.dumps(value))}
        note["checksum"] = _checksum(f"note:{kind}", key, note)
        self.fs.write_atomic(self.note_path(kind, key), json.dumps(note, sort_keys=True).encode())

    def note_keys(self) -> Iterator[tuple[str, str]]:
        for kind in self.fs.listdir(self.fs.path("notes")):
            for prefix in self.fs.listdir(self.fs.path("notes", kind)):
                for name in self.fs.listdir(self.fs.path("notes", kind, prefix)):
                    if name.endswith(".json") and _HEX.match(name[:-5]):
                        yield kind, name[:-5]

    # ------------------------------------------------------------ maintenance
    def usage(self, *sub: str) -> int:
        """Bytes the store (or its part ``sub``) takes on disk: what ``gc --max-size`` limits."""
        p = self.fs.path(*sub) if sub else self.fs.root
        return self.fs.usage(p) if self.fs.exists(p) else 0

    def info(self) -> dict[str, Any]:
        """Counts and sizes: objects, actions, notes; ``*_bytes`` on disk (``bytes``: the whole store, what
        ``gc --max-size`` limits), ``file_bytes`` the sum of the files' sizes."""
        objects = list(self.object_hashes())
        return {
            "root": self.url,
            "objects": len(objects),
            "actions": sum(1 for _ in self.action_keys()),
            "notes": sum(1 for _ in self.note_keys()),
            "object_bytes": self.usage("objects"),
            "action_bytes": self.usage("actions"),
            "note_bytes": self.usage("notes"),
            "bytes": self.usage(),
            "file_bytes": self.fs.tree_size(self.fs.root) if self.fs.exists(self.fs.root) else 0,
        }

    def verify(self, remove: bool = False) -> dict[str, Any]:
        """Read and re-hash every object; check every record and note.  With ``remove`` (``tusk cache verify
        --repair``) drop what is damaged, the records whose output was a dropped object and the notes naming
        one, so that the next verify finds nothing."""
        self._refuse_foreign("verifying")
        damaged_objects, outdated, bad_records, old_records, ok = [], [], [], 0, 0
        for h in list(self.object_hashes()):
            problem = self._problem(h)
            if problem is None:
                ok += 1
                continue
            if isinstance(problem, ObjectOutdated):
                outdated.append(h)  # an older Tusk's: not damage, but nothing here can use it
            else:
                damaged_objects.append((h, problem.message))
            if remove:
                self.discard(h)
        old = set(outdated)
        for key in list(self.action_keys()):
            rec = self.read_action(key)
            if rec is None:
                reason = "unreadable, damaged or edited record (its checksum does not match)"
            elif rec.get("kind") == "failure":
                continue
            elif rec.get("output") in old:
                old_records += 1  # an older Tusk's record of an older Tusk's object
                if remove:
                    self.drop_action(key)
                continue
            elif not self.has(rec.get("output", "")):
                reason = f"output object {rec.get('output')} missing"
            else:
                continue
            bad_records.append((key, reason))
            if remove:
                self.drop_action(key)
        gone = {h for h, _ in damaged_objects} | old if remove else set()
        for kind, key in list(self.note_keys()):
            why = self._bad_note(kind, key, gone)
            if why is not None:
                bad_records.append((f"note {kind}/{key}", why))
                if remove:
                    self.fs.remove_file(self.note_path(kind, key))
        return {"objects_ok": ok, "damaged_objects": damaged_objects, "bad_records": bad_records,
                "outdated_objects": outdated, "outdated_records": old_records, "removed": remove}

    def _bad_note(self, kind: str, key: str, gone: set[str]) -> str | None:
        """Why note ``kind/key`` is bad -- damaged, or naming an object in ``gone`` (removed as damaged) --
        else None.  Notes are read without touching them (verify is not a use)."""
        if self.fs.read_bytes(self.note_path(kind, key)) is None:
            return None
        value = self.get_note(kind, key, touch=False)
        if value is None:
            return "damaged or edited note (its checksum does not match)"
        if gone:
            text = json.dumps(value)
            named = next((h for h in gone if h in text), None)
            if named is not None:
                return f"names the removed object {named}"
        return None

    def gc(self, max_bytes: int, grace: float = 60.0) -> dict[str, Any]:
        """Shrink the whole store (objects, records, notes) to ``max_bytes`` on disk, least recently used
        first; no kept record or note names a removed object (``tusk.cache.gc``)."""
        from tusk.cache.gc import collect

        self._refuse_foreign("collecting garbage in")
        if not self.fs.exists(self.fs.root):
            return {"bytes_before": 0, "bytes_after": 0, "removed_objects": 0, "removed_actions": 0,
                    "removed_notes": 0, "kept_actions": 0, "max_bytes": max_bytes}
        return collect(self, max_bytes, grace)

    def _clean_scratch(self, now: float) -> None:
        for sub in ("tmp", "trash"):
            for name in self.fs.listdir(self.fs.path(sub)):
                p = self.fs.path(sub, name)
                if sub == "trash" or now - self.fs.mtime(p) > TMP_GRACE:
                    self.fs.remove_tree(p)

    def _refuse_foreign(self, doing: str, empty_ok: bool = False) -> None:
        """Only a store is written into or cleaned: a directory without the marker is the user's data."""
        root = self.fs.root
        if not self.fs.exists(root):
            return  # nothing there: a store is made on the first write; maintenance has nothing to do
        if not self.fs.isdir(root):
            raise StoreRefused(f"{self.url} is a file, not a Tusk store; not {doing} it")
        if self.fs.read_bytes(self.fs.path(MARKER)) is not None:
            return
        # another process may be making this very store: its marker, half-written or just written, counts
        if empty_ok and not [e for e in self.fs.listdir(root) if not e.startswith(f".{MARKER}.tmp-")]:
            return
        if self.fs.read_bytes(self.fs.path(MARKER)) is not None:
            return
        hint = " (Tusk makes a store only of an empty or new directory: choose another --cache-dir)" if empty_ok \
            else ""
        raise StoreRefused(f"{self.url} is not a Tusk store (no {MARKER}); not {doing} it{hint}")

    def clear(self) -> None:
        """Remove every object, record and note.  Refuses a directory that is not a store."""
        self._refuse_foreign("clearing")
        for sub in ("objects", "actions", "notes", "tmp", "trash"):
            self.fs.remove_tree(self.fs.path(sub))


def _check_name(name: str) -> None:
    if not isinstance(name, str) or not _HEX.match(name):
        raise ValueError(f"not a store name: {name!r}")


def parse_size(text: str | int) -> int:
    """``"500M"``, ``"2G"``, ``"1.5GB"``, ``"123"`` -> bytes (powers of 1024)."""
    if isinstance(text, int):
        return text
    m = re.match(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([kmgtp]?)(i?b)?\s*$", text, re.IGNORECASE)
    if not m:
        raise UsageError(f"not a size: {text!r} (examples: 500M, 2G, 1048576)")
    scale = 1024 ** " kmgtp".index(m.group(2).lower() or " ")
    return int(float(m.group(1)) * scale)


def open_store(location: str | os.PathLike) -> Store:
    return Store(location)
