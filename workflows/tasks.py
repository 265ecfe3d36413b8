"""The functions Dask runs: one pass on one module, named by hashes.

Every task function is top-level (importable by a worker), takes only
JSON-able arguments -- a context (store URL, verify/check flags, where the
kernel's files are), the step's spec, object hashes, the action key and its
parts -- and returns a small dict; modules travel through the store, never
through the scheduler.  A task never raises for a failure of the pass or the
input: it returns ``{"status": "error", "error": message, "fault": ...}`` so
one bad kernel cannot take the graph down, and ``{"status": "input-missing"}``
when its input object is gone or damaged so that the client can rebuild it.

Each task first looks at the action record for its key: a concurrent build
may have produced the result since the client looked.  With ``check`` (the
client sets it once a unit has met a damaged object) an object found
already stored under a hash being written is re-hashed and replaced if
damaged, instead of trusted.  A result computed here is stored (object,
then record) before the task returns, so a worker killed half-way leaves at
worst an unreferenced object behind; Dask then runs the task again
elsewhere and it is idempotent.

**Hand-off in memory.**  A process keeps the modules it produced or loaded
last (:func:`memory_budget` bytes of columns, least recently used out), so
the next step of the same kernel placed on the same worker -- the client
asks the scheduler for that worker -- starts from memory instead of reading
and re-hashing the object.  Passes never mutate their input, so sharing is
safe.  Each task names the kernel's modules no later step reads (``dead`` in
its context); a process lets them go before it loads the task's input, so a
worker that ran parts of an earlier step does not keep that step's whole
module while it loads the next (fresh memory costs a page fault per 4 KiB).

**Locations are not content.**  Objects never hold where a build writes: a
module's artifact directory is empty in the store, and a placeholder names
its kernel file relative to the kernel directory.  A pass that reads files
(``reads_files``: translate) gets them bound from the context's ``where``
just before it runs, and unbound again afterwards, so the same kernels built
into another ``-o`` or from another checkout hit the same records.

Every executed step reports where its time went (``timing``: fetch, run,
hash, store, in seconds) so that the build can show its overhead.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
import traceback
from collections import OrderedDict
from pathlib import Path
from typing import Any

from tusk.ir.errors import EnvError, TuskError
from tusk.workflows.task_usage import measured

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
        raise EnvError(f"worker {_where()} has a different version of pass {step['name']} than the client "
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
    keep = ("output", "input", "stats", "seconds", "insts_in", "insts_out", "parts_total", "parts_executed",
            "timing", "split_seconds", "part_seconds")
    return {k: rec[k] for k in keep if k in rec}


# ---------------------------------------------------------------- modules kept in this process

MEMO_FRACTION = 16  # a process keeps modules in 1/MEMO_FRACTION of its memory budget
_MEMORY: "OrderedDict[str, tuple[Any, int]]" = OrderedDict()
_PARENT: dict[str, str] = {}  # a kept step output -> the step's input (dead once the next step reads the output)
_BUDGET: list[int] = []  # this process's memo budget, once known


def machine_memory() -> int:
    """Bytes of physical RAM (the default of the ``memory`` setting)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 8 << 30


def memory_budget() -> int:
    """Bytes of modules this process keeps: 1/:data:`MEMO_FRACTION` of its Dask worker's ``memory_limit``
    (``local_cluster_executor`` sets it from the ``memory`` setting), or of the ``memory`` setting itself
    in-process.  Read once per process."""
    if not _BUDGET:
        limit = None
        if "distributed" in sys.modules:
            try:
                from distributed import get_worker

                limit = get_worker().memory_manager.memory_limit
            except (ImportError, ValueError, AttributeError):
                limit = None
        if not limit:
            from tusk.workflows import config

            limit = config.load().memory or machine_memory()
        _BUDGET.append(int(limit) // MEMO_FRACTION)
    return _BUDGET[0]


def use_memory_setting(memory: int | None) -> None:
    """The build's ``memory`` setting (tusk.toml included) sizes this process's memo, not just the
    environment's: an in-process build keeps modules in 1/:data:`MEMO_FRACTION` of it."""
    _BUDGET.clear()
    if memory:
        _BUDGET.append(int(memory) // MEMO_FRACTION)


def _module_bytes(module) -> int:
    """The columns of every table (the pools are small beside them)."""
    from tusk.ir.schema import SCHEMAS

    return sum(getattr(fn, t).nbytes() for fn in module.functions for t in SCHEMAS)


def remember(h: str, module, budget: int | None = None, parent: str | None = None) -> None:
    """Keep ``module`` (content hash ``h``) for the next step that reads it in this process, least recently
    used out beyond ``budget`` bytes (default :func:`memory_budget`).  The module just remembered stays even
    alone over budget: it is the one the kernel's next step reads, and the task holds it anyway."""
    budget = memory_budget() if budget is None else budget
    _MEMORY[h] = (module, _module_bytes(module))
    if parent is not None and parent != h:
        _PARENT[h] = parent
    _MEMORY.move_to_end(h)
    total = sum(sz for _, sz in _MEMORY.values())
    while total > budget and len(_MEMORY) > 1:
        old, (_, sz) = _MEMORY.popitem(last=False)
        _PARENT.pop(old, None)
        total -= sz


def forget(hashes) -> None:
    """Let the kept modules ``hashes`` go (the client knows no task reads them again)."""
    for h in hashes:
        if _MEMORY.pop(h, None) is not None:
            _PARENT.pop(h, None)


def forget_all() -> None:
    _MEMORY.clear()
    _PARENT.clear()


def fresh_process() -> None:
    """This process was just forked from another (a local worker from ``tusk compile``): nothing of the
    parent's per-process state -- kept modules, open stores, the memo budget -- is its own."""
    forget_all()
    _STORES.clear()
    _BUDGET.clear()


def _moved_on(h: str) -> None:
    """The kernel's next step has read ``h``: the input ``h`` was made from is read by nothing more of the
    chain, so its memory goes back to the allocator now, for the next step's output to reuse (a module the
    chain keeps past its use made every later output fresh, page-faulted memory)."""
    parent = _PARENT.pop(h, None)
    if parent is not None and _MEMORY.pop(parent, None) is not None:
        _PARENT.pop(parent, None)


def _load_input(store, h: str, clock: dict | None = None, keep: bool = True) -> tuple[Any, dict | None]:
    """The module ``h``, from this process's memory or the store (kept for the next reader with ``keep``);
    or (None, the answer for a missing input)."""
    from tusk.cache.objects import ObjectDamaged
    from tusk.cache.store import ObjectMissing

    t0 = time.perf_counter()
    kept = _MEMORY.get(h)
    if kept is not None and h not in store._damaged:
        _MEMORY.move_to_end(h)
        if clock is not None:
            clock["from_memory"] = clock.get("from_memory", 0) + 1
        return kept[0], None
    try:
        module = store.load(h)
    except (ObjectMissing, ObjectDamaged) as e:
        return None, {"status": "input-missing", "input": h, "error": e.message}
    finally:
        if clock is not None:
            clock["fetch"] = clock.get("fetch", 0.0) + time.perf_counter() - t0
    if keep:
        remember(h, module)
    return module, None


def _save(store, module, clock: dict, check: bool, parent: str | None = None, keep: bool = True) -> str:
    saved = store.save(module, check=check)
    clock["hash"] = clock.get("hash", 0.0) + saved.hash_seconds
    clock["store"] = clock.get("store", 0.0) + saved.write_seconds
    if keep:
        remember(saved.hash, module, parent=parent)
    return saved.hash


# ---------------------------------------------------------------- binding locations


def bind(module, where: dict | None):
    """``module`` with the artifact directory and the placeholders' kernel files of this build (a copy
    where anything changes; see the module docstring)."""
    if not where:
        return module
    art, kdir = where.get("artifact_dir", ""), where.get("kernel_dir", "")

    def absolute(written: str) -> str | None:
        return os.path.join(kdir, written) if kdir and written and not os.path.isabs(written) else None

    return _with_kernel_files(module, absolute, art)


def _with_kernel_files(module, rewrite, artifact_dir: str):
    """``module`` with each placeholder's ``klir_binary`` rewritten (where ``rewrite`` gives a new name)
    and the artifact directory set; functions are copied only where something changes."""
    from tusk.ir.module import Module
    from tusk.stages.host import kernel_file, naming_kernel_file, placeholder_rows

    fns = list(module.functions)
    for k, fn in enumerate(module.functions):
        for i in placeholder_rows(fn):
            attrs = fns[k].record(fns[k].insts.get("attrs", i))
            written = kernel_file(attrs)
            new = rewrite(written) if written is not None else None
            if new is not None and new != written:
                if fns[k] is fn:
                    fns[k] = fn.copy()
                fns[k].insts.set("attrs", i, fns[k].intern_record(naming_kernel_file(attrs, new)))
    return Module(fns, module.arch, module.version, module.attributes, artifact_dir, module.queues, module.extras)


def unbind(module, stats: dict, where: dict | None):
    """Inverse of :func:`bind` on a pass's output (and its ``artifacts`` stat)."""
    if not where:
        return module, stats
    kdir = where.get("kernel_dir", "")
    out = _with_kernel_files(module, lambda written: _relative(written, kdir), "")
    if isinstance(stats, dict) and isinstance(stats.get("artifacts"), dict):
        stats = {**stats, "artifacts": {name: _relative(src, kdir) or src
                                        for name, src in stats["artifacts"].items()}}
    return out, stats


def _relative(path: str, directory: str) -> str | None:
    """``path`` relative to ``directory`` when it lies inside it, else None."""
    if not directory or not os.path.isabs(path):
        return None
    rel = os.path.relpath(path, directory)
    return None if rel == ".." or rel.startswith(".." + os.sep) else rel


class _PassRefused(Exception):
    """The pass itself (run/split/merge) refused this input (an InputError or UsageError): the kernel's fault."""

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
    """Call a pass method; what it raises becomes :class:`_PassRefused` or :class:`_PassCrashed`, by
    :func:`tusk.ir.errors.fault_of`."""
    from tusk.ir.errors import INPUT, VerifyError, fault_of

    try:
        return fn(*args)
    except (VerifyError, EnvError):
        raise  # whose fault depends on who verified (_error) / is the machine's
    except Exception as e:  # noqa: BLE001 - Ctrl-C (BaseException) still stops the build
        if isinstance(e, TuskError) and fault_of(e, kernel=True) == INPUT:
            raise _PassRefused(e) from None
        raise _PassCrashed(e, traceback.format_exc()) from None


def failure_record(name: str, label: str | None, error: str, kind: str, parts: dict, worker: str) -> dict:
    """The action record of a kernel's refusal by pass ``name``: a rebuild reports it again without running."""
    return {"kind": "failure", "pass": name, "label": label, "error": error, "error_kind": kind,
            "input": parts.get("input"), "parts": parts, "worker": worker}


def _error(step: dict, e: BaseException, store_url: str | None = None, key: str | None = None,
           parts: dict | None = None) -> dict:
    """The error record of a failed task, with whose fault it is (:func:`tusk.ir.errors.fault_of`); a
    deterministic failure is also recorded under its key.

    * The pass refused the program (an InputError or UsageError it raised):
      ``input``.  That depends only on what the key covers (pass, version,
      code, options, input, kernel files), so it is cached like a result: a
      rebuild reports it again without running the pass -- except for a pass
      that reads files (``reads_files``, translate): the artifact directory
      it stages into is not in the key, so its failures may not repeat.
    * Any other exception of the pass: ``internal`` (a bug; the traceback
      goes with the record), or ``environment`` for OSError and EnvError.
    * The verifier rejected a pass's output: ``internal`` -- unless the pass
      brings the kernel in (``reads_files``), then it is the kernel's.
    * Anything outside the pass (loading, storing, the cluster): ``environment``.

    Only the first kind is recorded; the others run again next time.
    """
    from tusk.ir.errors import ENVIRONMENT, INPUT, VerifyError, fault_of

    name = step.get("name", "?")
    if isinstance(e, _PassRefused):
        e = e.error
        res = {"status": "error", "error": str(e), "kind": type(e).__name__, "fault": INPUT}
        if store_url and key and not step.get("reads_files"):
            try:
                _store(store_url).put_action(key, failure_record(name, step.get("label"), str(e),
                                                                 type(e).__name__, parts or {}, _where()))
            except OSError:
                pass
        return res
    if isinstance(e, _PassCrashed):
        return {"status": "error", "error": f"pass {name} failed: {type(e.error).__name__}: {e.error}",
                "kind": type(e.error).__name__, "fault": fault_of(e.error, kernel=True), "traceback": e.tb}
    if isinstance(e, VerifyError):
        if fault_of(e, kernel=True, read=bool(step.get("reads_files"))) == INPUT:
            return {"status": "error", "error": str(e), "kind": type(e).__name__, "fault": INPUT}
        return {"status": "error", "error": f"pass {name} produced invalid IR: {e}", "kind": type(e).__name__,
                "fault": fault_of(e, kernel=True), "traceback": traceback.format_exc()}
    where = f"{name}: " if isinstance(e, TuskError) else f"{name} failed: {type(e).__name__}: "
    return {"status": "error", "error": f"{where}{e}", "kind": type(e).__name__, "fault": ENVIRONMENT,
            "traceback": traceback.format_exc()}


def _finish(ctx: dict, store, key: str, parts: dict, step: dict, module, out, stats, seconds: float,
            clock: dict, extra: dict | None = None) -> dict:
    checks = None
    if ctx.get("verify") == DEFER:
        from tusk.ir.verify import verify_tasks

        checks = verify_tasks(out)  # None: small enough to check here
    if ctx.get("verify") and checks is None:
        from tusk.ir.errors import VerifyError
        from tusk.ir.verify import overlap_in_input
        from tusk.ir.verify import verify as verify_module

        t0 = time.perf_counter()
        try:
            verify_module(out)
        except VerifyError:
            blame = overlap_in_input(module)  # the kernel placed them so: its fault, not the pass's
            if blame is not None:
                raise _PassRefused(blame) from None
            raise
        clock["verify"] = time.perf_counter() - t0
    # a part's output is read by the merge, on the worker that split the step: kept only there (where the
    # part's input came from memory); a worker that fetched the part would keep a module nobody reads, and
    # its memory grows by every part it runs -- fresh pages, zeroed by the kernel, for each
    part = (extra or {}).get("kind") == "part"
    keep = not part or bool(clock.get("from_memory"))
    if parts.get("input") and not parts.get("slice") and _unchanged(module, out):  # the input's hash: nothing to hash or store
        h = str(parts["input"])
        if keep:
            remember(h, out)
    else:
        h = _save(store, out, clock, bool(ctx.get("check")), parts.get("input"), keep)
    timing = {k: round(v, 6) for k, v in clock.items() if k != "started"}
    timing["started"] = clock["started"]
    record = {"kind": "action", "pass": step["name"], "label": step["label"],
              "input": parts.get("base") or parts.get("input"),  # a slice's: the object it is cut from
              "output": h, "stats": _jsonable_stats(stats), "seconds": seconds, "insts_in": module.n_insts(),
              "insts_out": out.n_insts(), "parts": parts, "worker": _where(), "timing": timing, **(extra or {})}
    if checks is not None:  # recorded by the client once every check has passed (verify_checks tasks)
        return {"status": "executed", **_slim(record), "record": record, "checks": checks,
                "functions": [fn.name for fn in out.functions], "worker_address": _worker_address(),
                "ended": time.time()}
    store.put_action(key, record)
    return {"status": "executed", **_slim(record), "worker_address": _worker_address(), "ended": time.time()}


DEFER = "defer"  # ctx["verify"]: a big output's checks run as tasks of their own (verify_checks), in parallel


@measured
def verify_checks(store_url: str, h: str, input_hash: str, task: list) -> dict:
    """One piece of the verifier on object ``h`` (``ir.verify.verify_tasks``): the problems each check found.
    Where the live-overlap check finds some, also whether the step's input (``input_hash``) already had
    them: then the kernel placed its memory so (``blame``), not the pass."""
    clock: dict = {"started": time.time()}
    try:
        from tusk.ir.verify import overlap_in_input, verify_part

        store = _store(store_url)
        module, missing = _load_input(store, h, clock)
        if missing:
            return missing
        t0 = time.perf_counter()
        found = verify_part(module, (int(task[0]), tuple(task[1])))
        blame = None
        if found.get("live_overlap"):
            before, missing = _load_input(store, input_hash, clock)
            if missing:
                return missing
            err = overlap_in_input(before)
            blame = str(err) if err is not None else None
        clock["run"] = round(time.perf_counter() - t0, 6)
        return {"status": "checked", "problems": found, "blame": blame, "timing": clock,
                "worker_address": _worker_address(), "ended": time.time()}
    except Exception as e:  # noqa: BLE001
        return _error({"name": "verify"}, e)


def _unchanged(module, out) -> bool:
    """``out`` has the content of ``module`` without hashing it: the same function objects (passes never
    mutate their input) and the same module fields (:func:`tusk.ir.serial.module_meta`, what the hash covers
    besides the functions)."""
    if out is module:
        return True
    if len(out.functions) != len(module.functions) or any(a is not b for a, b in zip(out.functions,
                                                                                    module.functions)):
        return False
    from tusk.ir.serial import module_meta

    return module_meta(out) == module_meta(module)


def _worker_address() -> str | None:
    """The Dask worker this task runs on (the client asks for it again for the kernel's next step).  A worker
    has imported distributed long before; an in-process build must not import it for this (0.9 s)."""
    if "distributed" not in sys.modules:
        return None
    try:
        from distributed import get_worker

        return get_worker().address
    except (ImportError, ValueError):
        return None


def _open(ctx: dict, key: str | None, input_hash: str, clock: dict, keep: bool | None = None):
    """(store, input module, early answer): the early answer -- the cached record, or the
    report of a missing input -- is returned by the task as it is.  ``keep`` the input in this process
    (default: unless it is a part)."""
    store = _store(ctx["store"])
    hit = _cached(store, key) if key is not None else None  # None: a task that records nothing
    if hit:
        return store, None, hit
    forget(ctx.get("dead") or ())
    module, missing = _load_input(store, input_hash, clock, keep=not ctx.get("part") if keep is None else keep)
    _moved_on(input_hash)
    return store, module, missing


def _run(p, step: dict, module, ctx: dict, clock: dict, method: str = "run", *args):
    """Run one pass method, the kernel's files bound for a pass that reads them; (result, seconds)."""
    where = ctx.get("where") if step.get("reads_files") else None
    t0 = time.perf_counter()
    result = _call(getattr(p, method), bind(module, where), *args)
    seconds = time.perf_counter() - t0
    clock["run"] = clock.get("run", 0.0) + seconds
    if method in ("run", "merge"):
        out, stats = result
        result = unbind(out, stats, where)
    return result, seconds


@measured
def run_step(ctx: dict, step: dict, input_hash: str, key: str, parts: dict, extra: dict | None = None,
             spec: Any = None) -> dict:
    """Run one pass on object ``input_hash`` -- or, with a slice's ``spec``, on the part ``Pass.take`` cuts
    from it; record the action under ``key``."""
    clock: dict = {"started": time.time()}
    try:
        # a slice's base stays: the next slice of it that runs here reads it from memory (a worker that
        # fetched it runs half the parts)
        store, module, early = _open(ctx, key, input_hash, clock, keep=True if spec is not None else None)
        if early:
            return early
        p = _pass(step)
        if spec is not None:
            t0 = time.perf_counter()
            module = _call(p.take, module, spec)
            clock["take"] = time.perf_counter() - t0
        (out, stats), seconds = _run(p, step, module, ctx, clock)
        return _finish(ctx, store, key, parts, step, module, out, stats, seconds, clock, extra)
    except Exception as e:  # noqa: BLE001 - reported per kernel, never raised into the graph
        return _error(step, e, ctx.get("store"), key, parts)


@measured
def split_step(ctx: dict, step: dict, input_hash: str, key: str, parts: dict) -> dict:
    """Split the input of a fan-out pass into part objects (or run it whole when it declines)."""
    clock: dict = {"started": time.time()}
    try:
        store, module, early = _open(ctx, key, input_hash, clock)
        if early:
            return early
        p = _pass(step)
        pieces, seconds = _run(p, step, module, ctx, clock, "split_refs")
        if pieces is None:
            (out, stats), more = _run(p, step, module, ctx, clock)
            return _finish(ctx, store, key, parts, step, module, out, stats, seconds + more, clock)
        return _split_answer(ctx, store, input_hash, module, pieces, seconds, clock)
    except Exception as e:  # noqa: BLE001
        return _error(step, e, ctx.get("store"), key, parts)


@measured
def split_ahead(ctx: dict, step: dict, input_hash: str) -> dict:
    """The parts of a pass, cut from the input of the pass before it while that one runs
    (``Pass.split_ahead``): the parts only, nothing recorded; "whole" where the pass declines (the build then
    splits it after the pass before, as usual).  An error is not recorded either: the usual split meets it."""
    clock: dict = {"started": time.time()}
    try:
        store, module, missing = _open(ctx, None, input_hash, clock)
        if missing:
            return missing
        pieces, seconds = _run(_pass(step), step, module, ctx, clock, "split_ahead")
        if pieces is None:
            return {"status": "whole", "timing": clock, "ended": time.time()}
        return _split_answer(ctx, store, input_hash, module, pieces, seconds, clock)
    except Exception as e:  # noqa: BLE001
        return _error(step, e)


def _split_answer(ctx: dict, store, input_hash: str, module, pieces: list, seconds: float, clock: dict) -> dict:
    """A split task's answer: its module parts stored (a slice's base among them), each slice named by its
    base's hash and spec."""
    from tusk.stages.base import Slice

    saved = {i: _save(store, m, clock, bool(ctx.get("check"))) for i, m in enumerate(pieces)
             if not isinstance(m, Slice)}
    if any(isinstance(m, Slice) and m.base is None for m in pieces) and not store.has(input_hash):
        # the input came from this worker's memory but is gone from the store: the parts on other workers
        # read it there (splitting again after they found it missing would not bring it back)
        _save(store, module, clock, bool(ctx.get("check")))
    refs = [{"base": input_hash if m.base is None else saved[m.base], "spec": m.spec}
            if isinstance(m, Slice) else saved[i] for i, m in enumerate(pieces)]
    sizes = [m.size if isinstance(m, Slice) else m.n_insts() for m in pieces]
    return {"status": "split", "parts": refs, "sizes": sizes, "seconds": seconds,
            "insts_in": module.n_insts(), "timing": clock, "worker_address": _worker_address(), "ended": time.time()}


def run_part(ctx: dict, step: dict, part: str | dict, key: str, parts: dict) -> dict:
    """Run a fan-out pass on one part: a stored part (its content hash), or a slice the task cuts itself
    (``{"base": hash, "spec": ...}``: ``Pass.take``); the record is keyed by the part's identity."""
    ctx = {**ctx, "verify": False, "part": True}
    if isinstance(part, str):
        return run_step(ctx, step, part, key, parts, {"kind": "part"})
    return run_step(ctx, step, part["base"], key, parts, {"kind": "part"}, spec=part["spec"])


@measured
def merge_step(ctx: dict, step: dict, input_hash: str, part_outputs: list[str], part_stats: list[dict],
               key: str, parts: dict, split_seconds: float, part_seconds: list[float | None]) -> dict:
    """Merge the part results of a fan-out pass; records the whole action under ``key``, with the split's
    seconds and each part's (None: the part came from the cache), so a build that finds it cached says the
    same in its stats.json."""
    clock: dict = {"started": time.time()}
    try:
        store, module, early = _open(ctx, key, input_hash, clock)
        if early:
            return early
        outs, lost = [], []
        for h in part_outputs:  # load them all: every damaged one is removed now, so one repair fixes all
            m, missing = _load_input(store, h, clock)
            outs.append(m)
            if missing:
                lost.append(missing)
        if lost:
            return {**lost[0], "part": True, "lost": len(lost)}
        for h in part_outputs:  # the pieces the parts read are dead: their memory is the merge's to reuse
            _moved_on(h)
        (out, stats), seconds = _run(_pass(step), step, module, ctx, clock, "merge", outs, part_stats)
        del outs
        for h in part_outputs:  # and, merged, so are the part outputs
            _MEMORY.pop(h, None)
        return _finish(ctx, store, key, parts, step, module, out, stats, split_seconds + seconds, clock,
                       {"parts_total": len(part_outputs),
                        "parts_executed": sum(x is not None for x in part_seconds),
                        "refs": list(part_outputs), "split_seconds": split_seconds,
                        "part_seconds": list(part_seconds)})
    except Exception as e:  # noqa: BLE001
        return _error(step, e, ctx.get("store"), key, parts)


@measured
def time_module(store_url: str, module_hash: str, timelines: bool, limit: int | None = None) -> dict:
    """A timing step (``tusk.workflows.timings``): the makespan of one module and, with ``timelines``, its
    engine timelines (of functions up to ``limit`` instructions: the build's ``timeline_limit``), kept in the
    store as notes by the module's hash."""
    from tusk.workflows import timings

    clock: dict = {"started": time.time()}
    t0 = time.perf_counter()
    try:
        store = _store(store_url)
        note = timings.lookup(store, module_hash, timelines)
        status = "cached"
        if note is None:
            module, missing = _load_input(store, module_hash, clock)
            if missing:
                return missing
            note, status = timings.measure(store, module_hash, module, timelines, limit), "executed"
        seconds = time.perf_counter() - t0
        clock["run"] = round(seconds, 6)
        return {"status": status, **note, "seconds": seconds, "timing": clock, "worker_address": _worker_address(),
                "ended": time.time()}
    except Exception as e:  # noqa: BLE001 - a figure lost, never the kernel
        return {"status": "error", "error": f"timing failed: {type(e).__name__}: {e}", "traceback": traceback.format_exc()}


@measured
def write_timeline(store_url: str, kernel: str, units: list, path: str) -> dict:
    """A kernel's timeline.json, written into its staging directory once every unit is timed (a task: the
    client only checks the file's signature afterwards).  ``units``: [(unit name, [Timed.to_json(), ...]),
    ...] in the kernel's order, as the report reads them."""
    from tusk.workflows import timings, trace

    clock: dict = {"started": time.time()}
    t0 = time.perf_counter()
    try:
        store = _store(store_url)
        phases = [timings.load_phase(store, name, timings.Timed(**t), events=True) for name, timed in units
                  for t in timed]
        if not phases or trace._model() is None:
            return {"status": "skipped"}
        trace.write_kernel_timeline(Path(path), kernel, phases)
        clock["run"] = round(time.perf_counter() - t0, 6)
        return {"status": "written", "seconds": clock["run"], "timing": clock, "worker_address": _worker_address(),
                "ended": time.time()}
    except Exception as e:  # noqa: BLE001 - the report writes it instead
        return {"status": "error", "error": f"timeline failed: {type(e).__name__}: {e}"}


def warm_up(targets: list[str]) -> dict:
    """Run once in every worker (and in this process for an in-process build) when the executor starts:
    the imports and the code digest that the first task of each process would otherwise pay, so that
    start-up is reported as start-up and never charged to a pass (stats.json, the report, the estimate)."""
    started, t0 = time.time(), time.perf_counter()
    import importlib

    from tusk.cache.keys import package_digest
    from tusk.stages import resolve_target

    # what the first tasks import (the codec: every load; numpy.ma: numpy imports it on the first np.unique,
    # 0.1-0.3 s that the verifier would charge to the first pass of each process)
    # ``targets`` also names whole modules (no ":"): the KLR reader (1-1.5 s of generated dataclasses and
    # decoders) only when the build has KLR kernels
    modules = [t for t in targets if ":" not in t]
    for name in ("numcodecs", "numpy.ma", "tusk.cache.store", "tusk.ir.bir_json", "tusk.ir.verify",
                 "tusk.ir.liveness", "tusk.sim.timing", "tusk.stages.deps", *modules):
        try:
            importlib.import_module(name)
        except ImportError:
            pass

    for target in targets:
        if ":" not in target:
            continue
        try:
            resolve_target(target)
        except Exception:  # noqa: BLE001, S110 - the task that needs it reports the problem
            pass
    package_digest()
    return {"worker": _worker_address() or "this process", "pid": os.getpid(), "started": started,
            "seconds": round(time.perf_counter() - t0, 6)}


def probe_store(store_url: str, token: str) -> dict:
    """Run on every worker when a build starts on an existing cluster: can this worker read what the
    client wrote into the store, and write what the client will read?"""
    import hashlib

    where = _worker_address() or _where()
    try:
        store = _store(store_url)
        note = store.get_note("probe", token)
        if not isinstance(note, dict) or note.get("token") != token:
            return {"ok": False, "worker": where,
                    "why": f"it does not see the probe the client wrote into {store_url} (a different file system?)"}
        store.put_note("probe", hashlib.sha256(f"{token}:{where}".encode()).hexdigest(), {"worker": where})
        return {"ok": True, "worker": where}
    except Exception as e:  # noqa: BLE001 - reported to the client, which refuses the build
        return {"ok": False, "worker": where, "why": f"{type(e).__name__}: {e}"}
