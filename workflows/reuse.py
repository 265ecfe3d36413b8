"""A second ``-o`` from the same cache: the finished files of an earlier build copied, nothing decoded.

``tusk compile DIR -o A`` then ``tusk compile DIR -o B`` (same cache, same
options) runs no pass the second time, yet a real build still imports the
passes, numpy and the store, walks every action record and renders the
report.  After a build that succeeded, :func:`record` leaves a note in the
store (kind ``reuse``, keyed like the no-op index's fingerprint but without
``-o``, ``--json`` and ``--progress``, which change only where the files go
and what is printed) holding what a rebuild of those kernels into a fresh
directory would write that is not a copy of A's files:

* per kernel the files to copy (the BIR-JSON outputs, whose head names their
  artifact directory, are copied with that one string changed) and its
  stats.json as a build that finds every step cached writes it;
* report.html as that build renders it, with the output directory, the time
  and the wall time left as marks (and plotly.js, which the page inlines,
  left out: it is in the plotly package);
* the ``--json`` report and the summary such a build prints;
* the store paths whose loss would make that build run something (each
  step's record and output object, each timing note), and A's files with
  their size and mtime.

:func:`attempt`, called by the ``tusk`` entry point after the no-op check and
before anything heavy is imported (the standard library, plus plotly's file
for the page), places those files into ``-o`` -- only a directory that does
not exist or is empty -- if every input, every file of A and every store path
is as recorded.  Anything else builds for real.  The note is a shortcut,
never the truth: without it the real build makes the same files (checked by
tests/test_workflow_reuse.py).
"""

from __future__ import annotations

import html
import json
import os
import shutil
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from tusk.ir.errors import UsageError
from tusk.workflows import noop, out_lock

REUSE_NOTE = "reuse"
REUSE_FORMAT = 1
OUT_MARK = "@@tusk-reuse-out@@"
WHEN_MARK = "@@tusk-reuse-when@@"
SECONDS_MARK = "@@tusk-reuse-seconds@@"
PLOTLY_MARK = "@@tusk-reuse-plotly.js@@"
SENTINEL_SECONDS = 7777777.77  # the wall time the page is rendered with; its text becomes SECONDS_MARK
OUT_ONLY = {"-o", "--out", "--json", "--progress"}  # options that change where files go or what is printed
NOT_REUSED = {"--stages", "--stage"}  # outputs this shortcut does not copy: the real build writes them
REPORT, BUILD_TRACE = "report.html", "build-trace.json"


def _key_argv(argv: list[str]) -> list[str]:
    """``argv`` without the options of OUT_ONLY (and their values)."""
    kept, i = [], 0
    while i < len(argv):
        a = argv[i]
        name = a.partition("=")[0] if a.startswith("--") else a
        if name in OUT_ONLY:
            i += 1 if ("=" in a or name == "--json") else 2
            continue
        kept.append(a)
        i += 1
    return kept


def reuse_key(argv: list[str]) -> str:
    return noop.fingerprint(["reuse", str(REUSE_FORMAT), *_key_argv(argv)])


def _settings_file(directory: Path) -> bool:
    """DIR has a settings file (it may name another cache or Python kernels): not reused."""
    return (directory / "tusk.toml").exists() or (directory / "pyproject.toml").exists()


def _cache_root(opts: dict[str, list[str]]) -> str:
    given = (opts.get("--cache-dir") or [""])[-1] or os.environ.get("TUSK_CACHE_DIR")
    if not given:
        from tusk.workflows.config import _user_cache_dir

        given = str(_user_cache_dir())
    return os.path.abspath(os.path.expanduser(given))


def _note_path(root: str, key: str) -> str:
    return os.path.join(root, "notes", REUSE_NOTE, key[:2], f"{key}.json")


def _read_note(root: str, key: str) -> dict | None:
    """The note's value if its checksum holds (``tusk.cache.store`` writes notes; read here without it)."""
    from tusk.ir.canonical import content_checksum

    try:
        with open(_note_path(root, key), "rb") as fh:
            note = json.loads(fh.read())
    except (OSError, ValueError):
        return None
    if not isinstance(note, dict) or not isinstance(note.get("value"), dict):
        return None
    return note["value"] if note.get("checksum") == content_checksum(f"note:{REUSE_NOTE}", key, note) else None


def _fresh(out: Path) -> bool:
    """Only a new or empty directory: every other OUT has outputs the real build must look at."""
    if not out.exists():
        return True
    try:
        return out.is_dir() and not out.is_symlink() and not any(p.name != out_lock.LOCK_FILE for p in out.iterdir())
    except OSError:
        return False


def _usable(entry: dict, out: Path) -> bool:
    if entry.get("format") != REUSE_FORMAT or not _fresh(out) or Path(entry["source"]) == out:
        return False
    if not noop.inputs_unchanged(entry):
        return False
    src = Path(entry["source"])
    for k in entry["kernels"]:
        for rel, _patch, size, mtime in k["files"]:
            if noop.stat(str(src / k["name"] / rel)) != [size, mtime]:
                return False
    return all(os.path.exists(p) for p in entry["requires"])


# ====================================================================== the fast path


def attempt(argv: list[str], started: float) -> int | None:
    """Place the outputs of ``argv`` from the reuse note and print what the build would (exit code 0), or
    None when the note cannot answer: the real build runs."""
    parsed = noop.parse(argv, allow={"--json"})
    if parsed is None:
        return None
    directory, given_out, opts = parsed
    if NOT_REUSED & opts.keys() or _settings_file(directory):
        return None
    key = reuse_key(argv)
    root = _cache_root(opts)
    entry = _read_note(root, key)
    out = given_out.resolve()
    try:
        if entry is None or not _usable(entry, out):
            return None
        lock = out_lock.acquire(out)
    except (OSError, ValueError, KeyError, TypeError, UsageError):
        return None  # a build holds OUT (or OUT cannot be written): the real build says so
    try:
        return _reuse_into(argv, entry, directory, given_out, out, opts, started)
    finally:
        out_lock.release(lock)


def _reuse_into(argv: list[str], entry: dict, directory: Path, given_out: Path, out: Path,
                opts: dict[str, list[str]], started: float) -> int | None:
    """:func:`attempt` holding OUT's lock."""
    try:
        if not _fresh(out):
            return None  # another build got there first
        seconds = _place(entry, out, started)
    except (OSError, ValueError, KeyError, TypeError):
        return None  # whatever was placed is a complete kernel directory: the real build checks it
    for p in entry.get("touch", []):  # the use of records and notes is the LRU clock of `tusk cache gc`
        try:
            os.utime(p)
        except OSError:
            pass
    elapsed = time.perf_counter() - started
    if "--json" in opts:
        sys.stdout.write(json.dumps(_json_report(entry, out, seconds, elapsed), indent=1, sort_keys=True,
                                    default=str) + "\n")
        sys.stdout.flush()
        return 0
    summary = _at(entry["summary"], out)
    noop.print_summary({"summary": {**summary, "rows": [[*r[:-1], "ok"] for r in summary["rows"]]}}, elapsed)
    sys.stdout.flush()
    noop.write(argv, directory, given_out, entry["read_files"], summary)  # as the real build writes it
    return 0


def _at(value: Any, out: Path) -> Any:
    """``value`` (JSON) with the output directory's mark replaced by ``out``."""
    return json.loads(json.dumps(value).replace(OUT_MARK, json.dumps(str(out))[1:-1]))


def _place(entry: dict, out: Path, started: float) -> dict[str, float]:
    """Each kernel's directory assembled aside and moved into place, then report.html; the seconds of each
    kernel (its units' wall time in this command)."""
    from tusk.workflows.outputs import OWNER_FILE, STAGING_PREFIX, STATS_FILE, _json, _swap_dir, owned_dir

    out.mkdir(parents=True, exist_ok=True)
    src = Path(entry["source"])
    seconds: dict[str, float] = {}
    for k in entry["kernels"]:
        name = k["name"]
        staging = owned_dir(out, STAGING_PREFIX, name)
        try:
            (staging / OWNER_FILE).unlink()
            for rel, patch, _size, _mtime in k["files"]:
                target = staging / rel
                target.parent.mkdir(parents=True, exist_ok=True)
                if patch:
                    _copy_retargeted(src / name / rel, target, str(src / name), str(out / name))
                else:
                    shutil.copy2(src / name / rel, target)
            seconds[name] = round(time.perf_counter() - started, 6)
            (staging / STATS_FILE).write_bytes(_json(_timed(k["stats"], seconds[name])))
            _swap_dir(staging, out / name)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    if entry.get("report"):
        _write_report(entry["report"], out, time.perf_counter() - started)
    return seconds


def _copy_retargeted(src: Path, dst: Path, old: str, new: str) -> None:
    """Copy a BIR-JSON output naming artifact directory ``old`` as naming ``new`` (its first line, the
    module's head, names it exactly once; else ValueError: the real build writes it)."""
    import orjson

    was, now = b'"artifact_path":' + orjson.dumps(old), b'"artifact_path":' + orjson.dumps(new)
    with open(src, "rb") as fin, open(dst, "wb") as fout:
        head = fin.read(1 << 16)
        first = head.split(b"\n", 1)[0] if b"\n" in head else b""
        if first.count(b'"artifact_path":') != 1 or first.count(was) != 1:
            raise ValueError(f"{src}: its head does not name {old}")
        fout.write(head.replace(was, now, 1))
        shutil.copyfileobj(fin, fout, 1 << 22)


def _timed(stats: dict, seconds: float) -> dict:
    """A kernel's recorded stats with this command's wall time for its units."""
    units = [{**u, "seconds": seconds, "summary": {**u["summary"], "seconds": seconds}} for u in stats["units"]]
    return {**stats, "units": units}


def _secs(s: float) -> str:
    """The report's spelling of a wall time (``tusk.workflows.report_html._secs``)."""
    return f"{s * 1000:.0f} ms" if s < 1 else f"{s:.2f} s"


def _write_report(template: str, out: Path, seconds: float) -> None:
    from plotly.offline import get_plotlyjs

    from tusk.workflows.outputs import write_atomic

    page = (template.replace(OUT_MARK, html.escape(str(out), quote=True))
            .replace(WHEN_MARK, time.strftime("%Y-%m-%d %H:%M:%S"))
            .replace(SECONDS_MARK, _secs(seconds)).replace(PLOTLY_MARK, get_plotlyjs()))
    write_atomic(out / REPORT, page.encode("utf-8"))


def _json_report(entry: dict, out: Path, seconds: dict[str, float], elapsed: float) -> dict:
    data = _at(entry["json"], out)
    data["seconds"] = elapsed
    data["kernels"] = [_timed(k, seconds[k["kernel"]]) if k.get("kernel") in seconds else k
                       for k in data["kernels"]]
    return data


# ====================================================================== the note


def record(argv: list[str], req, result, reporter, read_files: list[str]) -> None:
    """After a build that succeeded: the reuse note of its command line (see the module docstring), or
    nothing when this build cannot be replayed that way.  Never fails the build."""
    try:
        from tusk.cache.store import Store

        store = Store(result.store)
        value = _entry(argv, req, result, reporter, read_files, store)
        if value is not None:
            store.put_note(REUSE_NOTE, reuse_key(argv), value)
    except Exception:  # noqa: BLE001 - a shortcut for the next command, never worth this one
        pass


def _entry(argv: list[str], req, result, reporter, read_files: list[str], store) -> dict | None:
    from tusk.workflows.report import noop_summary, result_json
    from tusk.workflows.trace import _model

    parsed = noop.parse(argv, allow={"--json"})
    if parsed is None or NOT_REUSED & parsed[2].keys() or _settings_file(Path(req.directory)):
        return None
    if result.failed or result.warnings or result.report is None or "://" in result.store or \
            any(kr.kernel.trace or kr.kernel.origin for kr in result.kernels) or _model() is None:
        return None
    view = cached_view(result, store)
    if any(t.status not in ("cached", "skipped") for kr in view.kernels for u in kr.units for t in u.timings):
        return None  # a timing step that failed runs again in the next build
    files = {k: v for k, v in reporter.files.items() if k != BUILD_TRACE}  # a fresh OUT has no build trace
    kernels = _kernels(view, files, Path(result.out))
    if kernels is None:
        return None
    return {"format": REUSE_FORMAT, "directory": str(req.directory),
            "inputs": noop.inputs(parsed[2], Path(req.directory), read_files), "read_files": read_files,
            "source": str(result.out), "kernels": kernels, **_store_paths(view, store),
            "report": _template(view, reporter, files) if REPORT in files else None,
            "json": json.loads(json.dumps(result_json(view, files), default=str)),
            "summary": noop_summary(view, [f"report: {Path(OUT_MARK) / REPORT}"] if REPORT in files else [])}


def cached_view(result, store):
    """``result`` as a build of the same kernels into a fresh directory reports it: every step and timing
    step cached (a step as its action record in ``store`` has it), every kernel written; the output
    directory and the wall time are marks.  KeyError: a record is missing."""
    from tusk.workflows.build_report import BuildReport
    from tusk.workflows.outputs import unit_stats

    kernels = []
    for kr in result.kernels:
        units = [replace(u, seconds=0.0, steps=[_cached_step(s, store) for s in u.steps],
                         timings=[replace(t, status="cached", seconds=0.0) if t.status == "executed" else t
                                  for t in u.timings]) for u in kr.units]
        kernels.append(replace(kr, units=units, written=True,
                               stats={**kr.stats, "units": [unit_stats(u) for u in units]}))
    report = BuildReport([u for kr in kernels for u in kr.units], executor="none (everything cached)",
                         unavailable=result.report.unavailable)
    return replace(result, kernels=kernels, report=report, out=OUT_MARK, seconds=SENTINEL_SECONDS)


def _cached_step(s, store):
    """Step ``s`` as a build that finds its record reports it (``tusk.workflows.graph.Build._record``): the
    record's figures, which may differ from the run's (a fanned-out pass records its split and merge time,
    the run also counts its parts')."""
    if s.status == "cached":
        return s
    rec = store.get_action(s.key)
    if rec is None or rec["output"] != s.output:
        raise KeyError(s.key)
    return replace(s, status="cached", reason="", timing={}, seconds=float(rec.get("seconds") or 0.0),
                   stats=dict(rec.get("stats") or {}), insts_in=rec.get("insts_in"), insts_out=rec.get("insts_out"),
                   parts_total=int(rec.get("parts_total") or 0), parts_executed=int(rec.get("parts_executed") or 0))


def _kernels(view, files: dict[str, str], source: Path) -> list[dict] | None:
    """Per kernel: its files to copy from ``source`` ([name, is an output, size, mtime]) and its stats."""
    kernels = []
    for kr in view.kernels:
        name = kr.kernel.name
        listed = [(u.unit.data["output"], True) for u in kr.units]
        listed += [(rel, False) for rel in kr.stats.get("artifacts") or {}]
        if f"{name}/timeline.json" in files:
            listed.append(("timeline.json", False))
        found = []
        for rel, patch in listed:
            st = noop.stat(str(source / name / rel))
            if st is None:
                return None
            found.append([rel, patch, *st])
        kernels.append({"name": name, "files": found, "stats": json.loads(json.dumps(kr.stats, default=str))})
    return kernels


def _store_paths(view, store) -> dict[str, list[str]]:
    """What must still be in the store for a real build to find every step and timing cached: each step's
    record and output object, each timing step's notes (``touch``: what that build would mark as used)."""
    from tusk.workflows import timings

    touch, objects = [], []
    for kr in view.kernels:
        for u in kr.units:
            for s in u.steps:
                touch.append(store.action_path(s.key))
                objects.append(store.object_path(s.output))
            for t in u.timings:
                if t.status == "cached":
                    key = timings.note_key(t.hash)
                    touch.append(store.note_path(timings.MAKESPAN_NOTE, key))
                    if t.timelines:
                        touch.append(store.note_path(timings.TIMELINE_NOTE, key))
                        touch.append(store.note_path(timings.EVENTS_NOTE, key))
                    if t.explain is not None:
                        touch.append(store.note_path(timings.EXPLAIN_NOTE, key))
    return {"touch": touch, "requires": touch + objects}


def _template(view, reporter, files: dict[str, str]) -> str:
    """report.html of ``view`` with marks for what differs from one command to the next."""
    import re

    from tusk.workflows.report_html import plotly_js, render

    page = render(view, reporter.phases, None, {k: v for k, v in files.items() if k != REPORT}, "")
    js, spent = plotly_js(), _secs(SENTINEL_SECONDS)
    if page.count(js) != 1 or page.count(spent) != 1:
        raise ValueError("the report does not have the expected shape")
    page = page.replace(js, PLOTLY_MARK).replace(spent, SECONDS_MARK)
    page, n = re.subn(r'(<p class="sub">Tusk [^<]*, )\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(</p>)',
                      lambda m: m.group(1) + WHEN_MARK + m.group(2), page, count=1)
    if n != 1:
        raise ValueError("the report does not say when it was written")
    return page
