"""The functions Dask runs: one pass on one module, named by hashes.

Every task function is top-level (importable by a worker), takes only
JSON-able arguments (store URL, the step's spec, object hashes, the action
key and its parts) and returns a small dict; modules travel through the
store, never through the scheduler.  A task never raises for a failure of
the pass or the input: it returns ``{"status": "error", "error": message}``
so one bad kernel cannot take the graph down, and
``{"status": "input-missing"}`` when its input object is gone or damaged so
that the client can rebuild the input.

Each task first looks at the action record for its key: a concurrent build
may have produced the result since the client looked.  With ``check`` (the
client sets it once a unit has met a damaged object) an object found
already stored under a hash being written is re-hashed and replaced if
damaged, instead of trusted.  A result computed
here is stored (object, then record) before the task returns, so a worker
killed half-way leaves at worst an unreferenced object behind; Dask then
runs the task again elsewhere and it is idempotent.
"""

from __future__ import annotations

import json
import os
import socket
import time
import traceback
from typing import Any

from tusk.ir.errors import TuskError

_STORES: dict[str, Any] = {}


def _store(url: str):
    from tusk.cache.store import Store

    s = _STORES.get(url)
    if s is None:
        s = _STORES[url] = Store(url)
    return s


def _pass(step: dict):
    from tusk.cache.keys import code_digest
    from tusk.stages import resolve_target

    cls = resolve_target(step["target"])
    # A worker running other code than the client would file results under the wrong key.
    if "version" in step and (str(cls.version) != step["version"] or code_digest(cls) != step["code"]):
        raise TuskError(f"worker {_where()} has a different version of pass {step['name']} than the client "
                        f"(restart the workers after updating Tusk)")
    return cls.with_options(step["options"])


def _jsonable_stats(stats: Any) -> dict:
    if stats is None:
        return {}
    try:
        return json.loads(json.dumps(stats, default=str))
    except (TypeError, ValueError):
        return {"unserialisable_stats": repr(stats)[:200]}


def _where() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def _cached(store, key: str) -> dict | None:
    rec = store.get_action(key)
    if rec is None:
        failed = store.get_failure(key)
        return {"status": "error", "error": failed["error"], "cached": True} if failed else None
    return {"status": "cached", **_slim(rec)}


def _slim(rec: dict) -> dict:
    keep = ("output", "input", "stats", "seconds", "insts_in", "insts_out", "parts_total", "parts_executed")
    return {k: rec[k] for k in keep if k in rec}


def _load_input(store, h: str) -> tuple[Any, dict | None]:
    from tusk.cache.objects import ObjectDamaged
    from tusk.cache.store import ObjectMissing

    try:
        return store.load(h), None
    except (ObjectMissing, ObjectDamaged) as e:
        return None, {"status": "input-missing", "input": h, "error": e.message}


class _PassRefused(Exception):
    """A TuskError raised by the pass itself (run/split/merge) on this input: the kernel's fault."""

    def __init__(self, error: TuskError):
        super().__init__(str(error))
        self.error = error


class _PassCrashed(Exception):
    """Any other exception of the pass itself: a bug (internal) or the machine (environment)."""

    def __init__(self, error: BaseException, tb: str):
        super().__init__(str(error))
        self.error = error
        self.tb = tb


def _call(fn, *args):
    """Call a pass method; what it raises becomes :class:`_PassRefused` or :class:`_PassCrashed`."""
    from tusk.ir.errors import EnvError, InternalError, VerifyError

    try:
        return fn(*args)
    except (VerifyError, EnvError):
        raise
    except InternalError as e:
        raise _PassCrashed(e, traceback.format_exc()) from None
    except TuskError as e:  # an InputError, or a plain TuskError about the program
        raise _PassRefused(e) from None
    except Exception as e:  # noqa: BLE001 - Ctrl-C (BaseException) still stops the build
        raise _PassCrashed(e, traceback.format_exc()) from None


def _error(step: dict, e: BaseException, store_url: str | None = None, key: str | None = None,
           parts: dict | None = None) -> dict:
    """The error record of a failed task, with whose fault it is; a deterministic failure is also
    recorded under its key.

    * The pass refused the program (a TuskError it raised): ``input``.  That
      depends only on what the key covers (pass, version, code, options,
      input, kernel files), so it is cached like a result: a rebuild reports
      it again without running the pass -- except for a pass that reads
      files (``reads_files``, translate): the artifact directory it stages
      into is not in the key, so its failures may not repeat.
    * Any other exception of the pass: ``internal`` (a bug; the traceback
      goes with the record), or ``environment`` for OSError and EnvError.
    * The verifier rejected a pass's output: ``internal`` -- unless the pass
      brings the kernel in (``reads_files``), then it is the kernel's.
    * Anything outside the pass (loading, storing, the cluster): ``environment``.

    Only the first kind is recorded; the others run again next time.
    """
    from tusk.ir.errors import ENVIRONMENT, INPUT, INTERNAL, VerifyError, fault_of

    name = step.get("name", "?")
    if isinstance(e, _PassRefused):
        e = e.error
        res = {"status": "error", "error": str(e), "kind": type(e).__name__, "fault": INPUT}
        if store_url and key and not step.get("reads_files"):
            try:
                _store(store_url).put_action(key, {"kind": "failure", "pass": name,
                                                   "label": step.get("label"), "error": str(e),
                                                   "error_kind": type(e).__name__,
                                                   "input": (parts or {}).get("input"), "parts": parts or {},
                                                   "worker": _where()})
            except OSError:
                pass
        return res
    if isinstance(e, _PassCrashed):
        fault = ENVIRONMENT if fault_of(e.error) == ENVIRONMENT else INTERNAL
        return {"status": "error", "error": f"pass {name} failed: {type(e.error).__name__}: {e.error}",
                "kind": type(e.error).__name__, "fault": fault, "traceback": e.tb}
    if isinstance(e, VerifyError):
        if step.get("reads_files"):
            return {"status": "error", "error": str(e), "kind": type(e).__name__, "fault": INPUT}
        return {"status": "error", "error": f"pass {name} produced invalid IR: {e}", "kind": type(e).__name__,
                "fault": INTERNAL, "traceback": traceback.format_exc()}
    where = f"{name}: " if isinstance(e, TuskError) else f"{name} failed: {type(e).__name__}: "
    return {"status": "error", "error": f"{where}{e}", "kind": type(e).__name__, "fault": ENVIRONMENT,
            "traceback": traceback.format_exc()}


def _finish(store, key: str, parts: dict, step: dict, module, out, stats, seconds: float, verify: bool,
            extra: dict | None = None, check: bool = False) -> dict:
    if verify:
        from tusk.ir.verify import verify as verify_module

        verify_module(out)
    h = store.put(out, check=check)
    record = {"kind": "action", "pass": step["name"], "label": step["label"], "input": parts.get("input"),
              "output": h, "stats": _jsonable_stats(stats), "seconds": seconds, "insts_in": module.n_insts(),
              "insts_out": out.n_insts(), "parts": parts, "worker": _where(), **(extra or {})}
    store.put_action(key, record)
    return {"status": "executed", **_slim(record)}


def _open(store_url: str, key: str, input_hash: str):
    """(store, input module, early answer): the early answer -- the cached record, or the
    report of a missing input -- is returned by the task as it is."""
    store = _store(store_url)
    hit = _cached(store, key)
    if hit:
        return store, None, hit
    module, missing = _load_input(store, input_hash)
    return store, module, missing


def run_step(store_url: str, step: dict, input_hash: str, key: str, parts: dict, verify: bool = False,
             check: bool = False, extra: dict | None = None) -> dict:
    """Run one pass on object ``input_hash``; record the action under ``key``."""
    try:
        store, module, early = _open(store_url, key, input_hash)
        if early:
            return early
        p = _pass(step)
        t0 = time.perf_counter()
        out, stats = _call(p.run, module)
        return _finish(store, key, parts, step, module, out, stats, time.perf_counter() - t0, verify, extra,
                       check=check)
    except Exception as e:  # noqa: BLE001 - reported per kernel, never raised into the graph
        return _error(step, e, store_url, key, parts)


def split_step(store_url: str, step: dict, input_hash: str, key: str, parts: dict, verify: bool = False,
               check: bool = False) -> dict:
    """Split the input of a fan-out pass into part objects (or run it whole when it declines)."""
    try:
        store, module, early = _open(store_url, key, input_hash)
        if early:
            return early
        p = _pass(step)
        t0 = time.perf_counter()
        pieces = _call(p.split, module)
        if pieces is None:
            out, stats = _call(p.run, module)
            return _finish(store, key, parts, step, module, out, stats, time.perf_counter() - t0, verify,
                           check=check)
        hashes = [store.put(m, check=check) for m in pieces]
        return {"status": "split", "parts": hashes, "seconds": time.perf_counter() - t0,
                "insts_in": module.n_insts()}
    except Exception as e:  # noqa: BLE001
        return _error(step, e, store_url, key, parts)


def run_part(store_url: str, step: dict, part_hash: str, key: str, parts: dict, check: bool = False) -> dict:
    """Run a fan-out pass on one part; the record is keyed by the part's content hash."""
    return run_step(store_url, step, part_hash, key, parts, False, check, {"kind": "part"})


def merge_step(store_url: str, step: dict, input_hash: str, part_outputs: list[str], part_stats: list[dict],
               key: str, parts: dict, split_seconds: float, parts_executed: int, verify: bool = False,
               check: bool = False) -> dict:
    """Merge the part results of a fan-out pass; records the whole action under ``key``."""
    try:
        store, module, early = _open(store_url, key, input_hash)
        if early:
            return early
        outs, lost = [], []
        for h in part_outputs:  # load them all: every damaged one is removed now, so one repair fixes all
            m, missing = _load_input(store, h)
            outs.append(m)
            if missing:
                lost.append(missing)
        if lost:
            return {**lost[0], "part": True, "lost": len(lost)}
        p = _pass(step)
        t0 = time.perf_counter()
        out, stats = _call(p.merge, module, outs, part_stats)
        seconds = split_seconds + time.perf_counter() - t0
        return _finish(store, key, parts, step, module, out, stats, seconds, verify,
                       {"parts_total": len(part_outputs), "parts_executed": parts_executed,
                        "refs": list(part_outputs)}, check=check)
    except Exception as e:  # noqa: BLE001
        return _error(step, e, store_url, key, parts)


def write_outputs(store_url: str, items: list) -> dict:
    """Write objects as BIR-JSON files: ``items`` is a list of ``[hash, path]``.

    Also reports the const files the modules name (the client stages them
    next to the outputs).

    Run on a worker so that serialising big modules happens in parallel;
    the client checks the files arrived (a worker on another machine may
    not share the output directory) and writes them itself otherwise.
    """
    from tusk.ir import bir_json

    try:
        store = _store(store_url)
        written, consts = [], set()
        for h, path in items:
            module, missing = _load_input(store, h)
            if missing:
                return missing
            bir_json.save(module, path)
            written.append([path, os.path.getsize(path), _where()])
            for fn in module.functions:
                consts.update(fn.strings[c] for c in set(fn.memlocs["const_path"].tolist()) if c >= 0)
        return {"status": "written", "files": written, "consts": sorted(consts)}
    except Exception as e:  # noqa: BLE001
        return _error({"name": "write_bir_json"}, e)
