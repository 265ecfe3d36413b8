"""Shrinking a store to a size: ``tusk cache gc --max-size``.

What counts is the whole store as the disk holds it (``Store.usage``):
objects, action records, notes (engine timelines, ETA history, memos),
the directories they sit in, leftovers in ``tmp/`` and ``trash/``.

What is kept is decided per *entry*: an action record, or the notes that
share a key (a makespan note and the engine timelines it promises).  An
entry costs its own files plus every object it names that no entry kept
before it.  Entries are taken newest use first (a record's use is the mtime
``touch_action`` sets; a note's, the mtime ``get_note`` sets) while they
fit; from the first one that does not fit, that entry and every older one
are dropped -- least recently used first, never an old small entry kept in
place of a newer one.  Then every object no kept entry names is removed, so
no kept record or note names an object that is gone.

Objects younger than ``grace`` seconds that no entry names are left: a
running build may be about to record them.  They count against the size.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Entry:
    """Files kept or dropped together, and the objects they need."""

    used: float
    what: str                        # "action" | "note"
    files: list[str]
    size: int
    refs: set[str] = field(default_factory=set)
    broken: bool = False             # unreadable, or names an object that is not there: dropped


def _note_refs(value: Any) -> set[str]:
    """Objects a note names (a host-module memo: ``{"hash": h}``)."""
    if isinstance(value, dict) and isinstance(value.get("hash"), str):
        return {value["hash"]}
    return set()


def entries(store, objects: dict[str, int]) -> list[Entry]:
    """Every action record and every group of notes sharing a key, with their size, use and references."""
    fs = store.fs
    found: list[Entry] = []
    for key in list(store.action_keys()):
        path = store.action_path(key)
        rec = store.read_action(key)
        used = fs.mtime(path)
        e = Entry(used, "action", [path], fs.usage(path))
        if rec is None:
            e.broken = True
        else:
            e.used = max(used, float(rec.get("used", 0) or 0))
            if rec.get("kind") != "failure":
                e.refs = {h for h in (rec.get("input"), rec.get("output"), *rec.get("refs", []))
                          if isinstance(h, str)}
                e.broken = not isinstance(rec.get("output"), str) or any(h not in objects for h in e.refs)
        found.append(e)
    groups: dict[str, Entry] = {}
    for kind, key in list(store.note_keys()):
        path = store.note_path(kind, key)
        e = groups.setdefault(key, Entry(0.0, "note", [], 0))
        e.files.append(path)
        e.size += fs.usage(path)
        e.used = max(e.used, fs.mtime(path))
        value = store.get_note(kind, key, touch=False)
        if value is None:
            e.broken = True
        refs = _note_refs(value)
        e.refs |= refs
        e.broken = e.broken or any(h not in objects for h in refs)
    return found + list(groups.values())


def collect(store, max_bytes: int, grace: float = 60.0) -> dict[str, Any]:
    """Bring ``store`` under ``max_bytes`` (see the module docstring); what was removed, sizes before and after."""
    fs = store.fs
    now = time.time()
    before = store.usage()
    store._clean_scratch(now)
    objects = {h: fs.usage(store.object_path(h)) for h in store.object_hashes()}
    all_entries = entries(store, objects)
    young = {h for h in objects if now - fs.mtime(fs.path("objects", h[:2], h, "zarr.json")) < grace}
    fixed = store.usage() - sum(objects.values()) - sum(e.size for e in all_entries)
    total = fixed + sum(objects[h] for h in young)
    kept: set[str] = set(young)
    full = False
    dropped: list[Entry] = []
    for e in sorted(all_entries, key=lambda e: e.used, reverse=True):
        cost = 0 if e.broken else e.size + sum(objects[h] for h in e.refs - kept)
        if e.broken or full or total + cost > max_bytes:
            full = full or not e.broken
            dropped.append(e)
            continue
        kept |= e.refs
        total += cost
    for e in dropped:
        for path in e.files:
            fs.remove_file(path)
    removed_objects = 0
    for h in objects:
        if h not in kept:
            store.discard(h)
            removed_objects += 1
    store._clean_scratch(now)
    fs.prune_empty_dirs([fs.path(sub) for sub in ("objects", "actions", "notes")])
    return {"bytes_before": before, "bytes_after": store.usage(), "removed_objects": removed_objects,
            "removed_actions": sum(1 for e in dropped if e.what == "action"),
            "removed_notes": sum(len(e.files) for e in dropped if e.what == "note"),
            "kept_actions": sum(1 for e in all_entries if e.what == "action") - sum(
                1 for e in dropped if e.what == "action"),
            "max_bytes": max_bytes}
