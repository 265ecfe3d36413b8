"""Why a step ran: which part of its action key differs from the last build of the same unit.

The last build is the one the cache remembers (a ``last-parts`` note per
unit, by its name and kernel file, written after every build), so a
kernel built into another output directory with another setting is told
what changed, not "not built before".  Without that note the unit's
``stats.json`` in this build's OUT is the fallback (a cache from before the
note existed).

The reason names what changed, as a user would set it::

    settings changed: arch gen3 -> gen2; input changed
    options changed: unroll.loops all -> marked
    options changed: heuristic_unroll.maxhu unset -> 8 (setting maxhu)
    kernel file changed: rmsnorm.klr
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

NOTE_KIND = "last-parts"
ORDER = ("pass", "version", "code", "options", "files", "env", "input")
NEVER = "not built before"
NO_RECORD = "no usable cached result (evicted, damaged or never recorded)"


def _note_key(unit) -> str:
    from tusk.cache.keys import digest

    return digest({"last-parts": 1, "unit": unit.name, "source": str(unit.source)})


def previous_parts(out: Path, store, unit) -> dict[str, dict]:
    """The key parts of each step of ``unit``'s last build: the cache's note, else OUT's stats.json."""
    note = None
    if store is not None:
        try:
            note = store.get_note(NOTE_KIND, _note_key(unit))
        except Exception:  # noqa: BLE001 - a reason is a nicety: a bad note is no note
            note = None
    if isinstance(note, dict) and isinstance(note.get("steps"), dict):
        return {k: v for k, v in note["steps"].items() if isinstance(v, dict)}
    from tusk.workflows.outputs import previous_parts as from_stats

    return from_stats(out, unit)


def remember(store, report) -> None:
    """Keep each unit's key parts of this build for the next build's reasons (units that did not fail
    before their last step; a failed step's parts are kept too: the next run says what changed since)."""
    if store is None or report is None:
        return
    for u in report.units:
        steps = {s.label: s.key_parts for s in u.steps if s.key_parts}
        if not steps:
            continue
        try:
            store.put_note(NOTE_KIND, _note_key(u.unit), {"steps": steps})
        except Exception:  # noqa: BLE001 - never worth a failed build
            pass


def reason(prev: dict | None, now: dict, label: str) -> str:
    """Why step ``label`` ran, given the key parts of its last build (``prev``) and of this one."""
    if not prev:
        return NEVER
    changed = [k for k in ORDER if prev.get(k) != now.get(k)]
    if not changed:
        return NO_RECORD
    return "; ".join(_one(k, prev.get(k), now.get(k), label) for k in changed)


def _show(v: Any) -> str:
    if v is None:
        return "unset"
    if isinstance(v, bool):
        return str(v).lower()
    return repr(v) if v == "" else str(v)


def _diff(old: Any, new: Any) -> list[tuple[str, Any, Any]]:
    old = old if isinstance(old, dict) else {}
    new = new if isinstance(new, dict) else {}
    return [(k, old.get(k), new.get(k)) for k in sorted(set(old) | set(new)) if old.get(k) != new.get(k)]


def _options(old: Any, new: Any, label: str) -> str:
    from tusk.workflows.config import SETTINGS

    by_option = {s.option: s.name for s in SETTINGS if s.option}
    items = []
    for name, a, b in _diff(old, new):
        setting = by_option.get(f"{label.split('#')[0]}.{name}")
        items.append(f"{label}.{name} {_show(a)} -> {_show(b)}" + (f" (setting {setting})" if setting else ""))
    return "options changed: " + ", ".join(items) if items else "options changed"


def _one(part: str, old: Any, new: Any, label: str) -> str:
    if part == "env":
        items = [f"{name} {_show(a)} -> {_show(b)}" for name, a, b in _diff(old, new)]
        return "settings changed: " + ", ".join(items) if items else "settings changed"
    if part == "options":
        return _options(old, new, label)
    if part == "files":
        names = [os.path.basename(name) for name, _a, _b in _diff(old, new)]
        return "kernel file changed: " + ", ".join(names) if names else "kernel file changed"
    if part == "version":
        return f"pass version changed: {_show(old)} -> {_show(new)}"
    return {"input": "input changed", "code": "pass source changed", "pass": "pass changed"}[part]
