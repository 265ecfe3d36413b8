"""`tusk compile`: kernels of a directory through the pipeline, results into OUT.

Per kernel, ``OUT/<kernel>/`` receives

* ``<kernel>.bir.json`` (``<kernel>.core<k>.bir.json`` for each core of an
  LNC kernel): the final module, written with ``ir.bir_json.save``;
* the staged artifacts: a copy of the kernel file and of the files it
  references (as the backend stages them into its artifact directory),
  and with ``--stages`` every pass's output as ``stages/NN-<pass>.bir.json``;
* ``stats.json``: the build record (per step: cached or executed and why,
  key parts, hashes, instruction counts, pass statistics, seconds, the
  staged artifacts).  It also marks the directory as Tusk's: an existing
  ``OUT/<kernel>`` without it is never replaced.

The directory is assembled aside (``OUT/.tusk-staging-*``) and moved into
place only when every core of the kernel succeeded, so nothing is ever
half-written.  A kernel that fails by its own fault (a pass refused it, its
file cannot be read) loses the result of an earlier build (it would be
stale); a failure that is not the kernel's (the cache, the cluster, the file
system) keeps it.  A kernel whose final hashes, input files and staged
artifacts match its existing ``stats.json`` is not rewritten (only its
stats record is refreshed).

Before anything is written the request is checked: the input directory
exists, OUT is not a file and is not the input directory (it may lie inside it),
``--core-id`` is not negative, a ``--scheduler`` answers.  Per kernel,
``OUT/<kernel>`` may not be a symbolic link, be or contain the input
directory or an input file, or be a directory Tusk did not write; such a
kernel fails with the reason and its directory is left alone.  Outputs of
kernels no longer in the input directory are left in place (not pruned).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from tusk.ir.errors import TuskError
from tusk.workflows import config as config_mod
from tusk.workflows.graph import BuildReport, BuildUnit, UnitReport, build, local_cluster_executor, scheduler_executor
from tusk.workflows.kernels import (HOST_VERSION, Kernel, Skipped, artifact_dir, discover, file_digests, given_host_module,
                               host_module, output_name)
from tusk.workflows.pipeline import (ROTATION_PASSES, UNROLL_PASSES, apply_defaults, apply_sets, default_pipeline,
                                load_pipeline, resolve)

STATS_FILE = "stats.json"
STATS_FORMAT = 2
TRANSLATE = "translate_nki_ast_to_bir"
STAGING_PREFIX = ".tusk-staging-"
OLD_PREFIX = ".tusk-old-"


@dataclass
class CompileRequest:
    directory: Path
    out: Path
    workers: int | None = None
    scheduler: str | None = None
    dashboard: bool = False
    cache_dir: str | None = None
    no_cache: bool = False
    core_id: int | None = None
    sets: list[str] = field(default_factory=list)
    pipeline: Path | None = None
    stages: bool = False
    verify: bool | None = None


@dataclass
class KernelResult:
    kernel: Kernel
    units: list[UnitReport] = field(default_factory=list)
    error: str | None = None
    written: bool = False        # False: output was already up to date
    stats: dict[str, Any] = field(default_factory=dict)
    keep: bool = False           # on error: leave OUT/<kernel> as it is (the failure is not the kernel's)

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclass
class CompileResult:
    kernels: list[KernelResult]
    skipped: list[Skipped]
    report: BuildReport | None
    unavailable: list[tuple[str, str]]
    pipeline: list[str]
    store: str
    out: Path
    seconds: float
    dashboard: str | None = None
    warnings: list[str] = field(default_factory=list)

    @property
    def failed(self) -> list[KernelResult]:
        return [k for k in self.kernels if not k.ok]

    @property
    def exit_code(self) -> int:
        return 1 if self.failed else 0

    def to_json(self) -> dict[str, Any]:
        return {
            "out": str(self.out), "store": self.store, "seconds": self.seconds,
            "cluster_started": bool(self.report and self.report.cluster_started),
            "executor": self.report.executor if self.report else "none",
            "executed": self.report.n_executed if self.report else 0,
            "cached": self.report.n_cached if self.report else 0,
            "pipeline": self.pipeline,
            "not_available": [{"step": label, "reason": why} for label, why in self.unavailable],
            "kernels": [k.stats or {"kernel": k.kernel.name, "source": str(k.kernel.path), "error": k.error}
                        for k in self.kernels],
            "failed": [{"kernel": k.kernel.name, "error": k.error} for k in self.failed],
            "skipped": [{"path": str(s.path), "reason": s.reason} for s in self.skipped],
            "warnings": self.warnings,
        }


# ====================================================================== driver


def compile_directory(req: CompileRequest, *, executor: Any = None,
                      progress: Callable[[str, UnitReport, str], None] | None = None,
                      on_start: Callable[[int, int], None] | None = None,
                      on_executor: Callable[[Any], None] | None = None,
                      on_pipeline: Callable[[Any], None] | None = None) -> CompileResult:
    """Compile every kernel of ``req.directory`` into ``req.out`` (see the module docstring).

    ``executor`` overrides how tasks run (a factory or an executor; tests
    pass an in-process one or a client of their own cluster).
    ``on_start(n_units, n_steps)`` is called before the build, ``progress`` per
    resolved step, ``on_executor`` when a cluster is started, ``on_pipeline``
    with the resolved pipeline before anything is built.
    """
    from tusk.cache.store import Store

    t0 = time.perf_counter()
    cfg = config_mod.load({"cache_dir": req.cache_dir, "workers": req.workers, "scheduler": req.scheduler,
                           "verify": req.verify})
    if req.core_id is not None and req.core_id < 0:
        raise TuskError(f"--core-id must be a logical core number (0 or more), got {req.core_id}")
    entries = load_pipeline(req.pipeline) if req.pipeline else default_pipeline()
    apply_defaults(entries, config_mod.pass_defaults(cfg))
    apply_sets(entries, req.sets)
    resolved = resolve(entries)
    if on_pipeline:
        on_pipeline(resolved)
    directory = Path(req.directory)
    if not directory.is_dir():
        raise TuskError(f"{directory}: no such directory" if not directory.exists() else
                        f"{directory} is not a directory")
    src = Path(os.path.realpath(directory))
    out = Path(req.out).resolve()
    if out.exists() and not out.is_dir():
        raise TuskError(f"{req.out}: the output directory is an existing file")
    if out == src:
        # OUT inside the input directory is fine (the input is not searched recursively), OUT == input is not:
        # every kernel's output directory would sit among the kernels
        raise TuskError(f"the output directory {out} is the input directory; choose another -o")
    memory = not req.no_cache and str(cfg.cache_dir).startswith("memory://")
    connected = None
    if executor is None and cfg.scheduler and not memory:
        connected = scheduler_executor(cfg.scheduler)  # fail fast, before anything is written

    scratch = None
    writer = None
    try:
        out.mkdir(parents=True, exist_ok=True)
        _clean_leftovers(out)
        if req.no_cache:
            scratch = tempfile.mkdtemp(prefix=".tusk-nocache-", dir=out)
            store = Store(scratch)
        else:
            store = Store(cfg.cache_dir)
        kernels, skipped = discover(directory, store)
        results: dict[str, KernelResult] = {}
        units: list[BuildUnit] = []
        for k in kernels:
            if req.core_id is not None and k.error is None and k.fmt != "host" and req.core_id >= k.ncores:
                skipped.append(Skipped(k.path, f"a kernel of {k.ncores} logical core(s): --core-id {req.core_id} "
                                               f"is past them"))
                continue
            kr = results[k.name] = KernelResult(k)
            problem = _output_problem(out / k.name, src, k)
            if problem:  # OUT/<kernel> is not ours to write: the kernel fails, the directory stays as it is
                kr.error, kr.keep = f"{k.path}: {problem}", True
                continue
            if k.error:
                kr.error = k.error
                continue
            try:
                units.extend(_units(k, out, req.core_id, cfg, store))
            except TuskError as e:
                kr.error = str(e)
        previous = {u.name: _previous_parts(out, u) for u in units}
        writer = _Writer(out, store, resolved.steps, req.stages,
                         existed={k.name for k in kernels if (out / k.name).exists()})
        if on_start:
            on_start(len(units), len(resolved.steps))

        if executor is None and memory:
            from tusk.workflows.graph import InlineExecutor

            executor = InlineExecutor  # a memory:// store lives in this process only
        if executor is None:
            if connected is not None:
                executor = lambda: connected  # noqa: E731
            elif cfg.workers and cfg.workers > 0:
                # worker scratch space inside the store (local stores): nothing written elsewhere
                scratch_dir = store.fs.path("dask-scratch") if "://" not in store.url else None
                executor = lambda: local_cluster_executor(cfg.workers, req.dashboard, scratch_dir)  # noqa: E731
        dashboard: list[str] = []

        def _on_executor(ex: Any) -> None:
            link = getattr(ex, "dashboard_link", None)
            if link and (req.dashboard or cfg.scheduler):
                dashboard.append(link)
            if on_executor:
                on_executor(ex)

        report = build(units, resolved.steps, store, env=config_mod.output_key(cfg), executor=executor,
                       verify=bool(cfg.verify), previous=previous, on_final=writer.on_final, progress=progress,
                       on_executor=_on_executor)
        report.unavailable = resolved.unavailable
        for u in report.units:
            results[u.unit.kernel].units.append(u)
        for kr in results.values():
            if kr.error is None:
                writer.finish_kernel(kr, resolved)
            elif not kr.keep:
                writer.remove(kr.kernel.name)  # no stale result of an earlier build
        return CompileResult(list(results.values()), skipped, report, resolved.unavailable,
                             [s.spec for s in resolved.steps], store.url, out, time.perf_counter() - t0,
                             dashboard[0] if dashboard else None, list(resolved.warnings))
    finally:
        if writer is not None:
            writer.discard_staging()  # left only when the build stopped half-way
        if connected is not None:
            connected.close()
        if scratch:
            shutil.rmtree(scratch, ignore_errors=True)


def _output_problem(dest: Path, src: Path, k: Kernel) -> str | None:
    """Why OUT/<kernel> must not be written, or None.

    Swapping the kernel's directory into place replaces ``dest`` whole, and
    translate stages files into it while the build runs.
    """
    if dest.name.startswith((STAGING_PREFIX, OLD_PREFIX, ".tusk-nocache-")):
        return f"the kernel name {dest.name!r} is reserved for Tusk's temporary directories; rename the file"
    if dest.is_symlink():
        return f"the output directory {dest} is a symbolic link; not writing through it"
    for p in (src, k.path, *k.refs):
        real = Path(os.path.realpath(p))
        inside_input_ok = p == src  # e.g. ./tusk-out/<kernel> when compiling "."
        if real == dest or real.is_relative_to(dest) or (not inside_input_ok and dest.is_relative_to(real)):
            what = "the input directory" if p == src else f"the input file {p}"
            return f"the output directory {dest} would overlap {what}; choose another -o"
    if dest.exists() and not _is_tusk_output(dest):
        return f"{dest} exists and is not a Tusk output (no {STATS_FILE}); not replacing it"
    return None


def _units(k: Kernel, out: Path, core_id: int | None, cfg, store=None) -> list[BuildUnit]:
    files = file_digests(k)
    if k.fmt == "host":
        from tusk.cache.keys import digest

        art = artifact_dir(out, k)
        # the rewritten module's hash, memoised: a no-op rebuild does not parse the host module
        memo = digest({"host": HOST_VERSION, "file": k.digest, "art": art, "placeholders": k.placeholders})
        note = store.get_note("host-module", memo) if store is not None else None
        h = note.get("hash") if isinstance(note, dict) else None
        if store is not None and not (isinstance(h, str) and store.has(h)):
            h = store.put(given_host_module(k, art))
            store.put_note("host-module", memo, {"hash": h})
        return [BuildUnit(k.name, None, host_hash=h, files=files, kernel=k.name, core=None, source=str(k.path),
                          data={"output": output_name(k, None)}, reload=lambda: given_host_module(k, art))]
    cores = [core_id] if core_id is not None else list(range(k.ncores))
    units = []
    for c in cores:
        module = host_module(k, c, artifact_dir(out, k), arch=cfg.arch, instruction_limit=cfg.instruction_limit)
        name = k.name if k.ncores == 1 and core_id is None else f"{k.name}[{c}]"
        units.append(BuildUnit(name, module, files=files, kernel=k.name, core=c, source=str(k.path),
                               data={"output": output_name(k, c)}))
    return units


# ====================================================================== outputs


def _read_stats(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and data.get("tusk_stats") == STATS_FORMAT else None


def _is_tusk_output(d: Path) -> bool:
    """A directory Tusk wrote (its stats.json says so, whatever its format version)."""
    try:
        data = json.loads((d / STATS_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return d.is_dir() and not d.is_symlink() and isinstance(data, dict) and "tusk_stats" in data


def _previous_parts(out: Path, unit: BuildUnit) -> dict[str, dict]:
    data = _read_stats(out / unit.kernel / STATS_FILE) or {}
    for u in data.get("units", []):
        if u.get("unit") == unit.name:
            return {s["label"]: s.get("key_parts", {}) for s in u.get("steps", [])}
    return {}


class _Writer:
    """Has each unit's final module written aside as it completes; moves whole kernel directories in place."""

    def __init__(self, out: Path, store, steps, stages: bool, existed: set[str] = frozenset()):
        self.out = out
        self.store = store
        self.steps = steps
        self.stages = stages
        self.existed = set(existed)   # kernel directories that were there before this build
        self.started = time.time()
        self.staging: dict[str, Path] = {}
        self.up_to_date: dict[str, bool] = {}

    def remove(self, kernel: str) -> None:
        """Remove a failed kernel's directory: an earlier result, or what passes staged there now."""
        dest = self.out / kernel
        if _is_tusk_output(dest) or (kernel not in self.existed and dest.is_dir() and not dest.is_symlink()):
            _remove_dir(dest)

    def discard_staging(self) -> None:
        for p in self.staging.values():
            shutil.rmtree(p, ignore_errors=True)
        self.staging.clear()

    def _staging(self, kernel: str) -> Path:
        p = self.staging.get(kernel)
        if p is None:
            p = self.out / f"{STAGING_PREFIX}{kernel}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
            p.mkdir()
            self.staging[kernel] = p
        return p

    def _is_up_to_date(self, ur: UnitReport, final: str) -> dict | None:
        """The unit's record in the existing stats.json if its output (and every staged artifact) is current."""
        unit = ur.unit
        dest = self.out / unit.kernel
        data = _read_stats(dest / STATS_FILE)
        if not data or data.get("files") != unit.files or data.get("stages") != self.stages:
            return None
        for rel, size in (data.get("artifacts") or {}).items():  # a deleted or truncated artifact: rewrite
            try:
                if (dest / rel).stat().st_size != size:
                    return None
            except OSError:
                return None
        for u in data.get("units", []):
            if u.get("unit") == unit.name:
                ok = u.get("final") == final and (dest / unit.data["output"]).is_file()
                return u if ok else None
        return None

    def on_final(self, ur: UnitReport, final: str) -> list[tuple[str, Path]] | None:
        """Called by the build when a unit's chain is complete: the BIR-JSON files to write.

        The build writes them (on a worker when a cluster runs) into the
        kernel's staging directory; nothing when the output is up to date.
        """
        unit = ur.unit
        prev = self._is_up_to_date(ur, final)
        self.up_to_date[unit.name] = prev is not None
        if prev is not None:
            ur.outputs = {"consts": list(prev.get("consts") or [])}  # the same final module names the same files
            return None
        staging = self._staging(unit.kernel)
        items: list[tuple[str, Path]] = [(final, staging / unit.data["output"])]
        if self.stages:
            d = staging / "stages" / (unit.name.replace("[", "_").replace("]", ""))
            d.mkdir(parents=True, exist_ok=True)
            for n, s in enumerate(ur.steps, 1):
                items.append((s.output, d / f"{n:02d}-{s.label.replace('#', '_')}.bir.json"))
        return items

    def finish_kernel(self, kr: KernelResult, resolved) -> None:
        """Move the kernel's staged directory into place, or on failure leave or remove the old one."""
        k = kr.kernel
        failed = [u for u in kr.units if not u.ok]
        staging = self.staging.pop(k.name, None)
        kr.stats = _kernel_stats(kr, resolved, self.stages)
        try:
            if failed or not kr.units:
                kr.error = "; ".join(dict.fromkeys(_message(u) for u in failed)) or "nothing was built"
                kr.keep = any(u.infra for u in failed)
                if not kr.keep:
                    self.remove(k.name)  # the kernel is bad now: no stale result of an earlier build
            else:
                self._write(kr, staging)
                staging = None
        except (OSError, TuskError) as e:  # nothing was moved: the earlier output stays
            kr.error, kr.keep = f"{k.path}: writing the outputs failed: {e}", True
        finally:
            if staging is not None:
                shutil.rmtree(staging, ignore_errors=True)
        if kr.error:
            kr.stats["error"] = kr.error

    def _write(self, kr: KernelResult, staging: Path | None) -> None:
        dest = self.out / kr.kernel.name
        artifacts = self._artifacts(kr)
        if staging is None:  # every unit and artifact up to date: refresh the record only
            kr.stats["artifacts"] = {rel: (dest / rel).stat().st_size for rel in artifacts}
            _write_atomic(dest / STATS_FILE, _json(kr.stats))
            return
        for u in kr.units:
            if self.up_to_date.get(u.unit.name):
                try:
                    shutil.copy2(dest / u.unit.data["output"], staging / u.unit.data["output"])
                except OSError:  # moved away meanwhile (a concurrent build): write it again
                    from tusk.ir import bir_json

                    bir_json.save(self.store.load(u.final), staging / u.unit.data["output"])
        kr.stats["artifacts"] = self._stage_artifacts(artifacts, staging, dest)
        (staging / STATS_FILE).write_bytes(_json(kr.stats))
        _swap_dir(staging, dest)  # dest was checked before the build: absent, or a Tusk output
        kr.written = True

    def _artifacts(self, kr: KernelResult) -> dict[str, Path]:
        """Artifact-relative name -> source of every file the kernel's directory must hold besides the outputs.

        The kernel file; what translate reports in its ``artifacts`` stat
        (the files it stages -- a cached build does not run it); every
        relative const path the final modules name, from the kernel file's
        directory otherwise.  A file that cannot be found is an error: the
        output would name a file that is not there.
        """
        k = kr.kernel
        wanted: dict[str, Path] = {}
        own = {STATS_FILE, *(u.unit.data["output"] for u in kr.units)}

        def add(rel: str, src: Path, what: str) -> None:
            if rel in own or rel.split("/", 1)[0] == "stages":
                raise TuskError(f"{what} {rel} would overwrite an output of the build")
            if rel in wanted and os.path.realpath(wanted[rel]) != os.path.realpath(src):
                raise TuskError(f"two files would be staged as {rel}: {wanted[rel]} and {src}")
            wanted[rel] = src

        add(k.path.name, k.path, "the kernel file")
        for u in kr.units:
            for s in u.steps:
                if s.name == TRANSLATE:
                    for rel, src in (s.stats.get("artifacts") or {}).items():
                        add(rel, Path(src), "the staged file")
        for u in kr.units:
            for rel in u.outputs.get("consts", []):
                if os.path.isabs(rel) or rel in wanted:
                    continue  # an absolute const path is used where it is
                if ".." in Path(rel).parts:
                    raise TuskError(f"{u.unit.data['output']} names const file {rel}, outside its directory")
                src = k.path.parent / rel
                if not src.is_file():
                    raise TuskError(f"{u.unit.data['output']} names const file {rel}, which was not found "
                                    f"(looked for {src})")
                add(rel, src, "the const file")
        return wanted

    def _stage_artifacts(self, wanted: dict[str, Path], staging: Path, dest: Path) -> dict[str, int]:
        """Copy the artifacts into the staging directory; returns name -> size (recorded in stats.json).

        Files a pass wrote into the artifact directory during this build,
        beyond those, are carried over too.
        """
        if dest.is_dir():
            for src in dest.rglob("*"):
                rel = src.relative_to(dest).as_posix()
                if src.is_file() and not src.is_symlink() and rel not in wanted and rel != STATS_FILE \
                        and not rel.startswith("stages/") and not (staging / rel).exists():
                    try:
                        if src.stat().st_mtime >= self.started - 1:
                            shutil.copy2(src, _target(staging, rel))
                    except OSError:
                        pass
        sizes = {}
        for rel, src in wanted.items():
            target = _target(staging, rel)
            try:
                shutil.copy2(src, target)
            except OSError as e:
                raise TuskError(f"cannot stage {src} as {rel}: {e.strerror or e}") from None
            sizes[rel] = target.stat().st_size
        return sizes


def _target(staging: Path, rel: str) -> Path:
    target = staging / rel
    target.parent.mkdir(parents=True, exist_ok=True)
    return target


def _json(data: dict) -> bytes:
    return json.dumps(data, indent=1, sort_keys=True, default=str).encode()


def _message(u: UnitReport) -> str:
    """The unit's error, naming the kernel file and the pass (unless the message already does)."""
    msg = u.error or "failed"
    failed = next((s for s in u.steps if s.status == "failed"), None)
    if failed is not None and not msg.startswith((f"{failed.label}:", f"{failed.name}:")):
        msg = f"{failed.label}: {msg}"
    src = u.unit.source
    if src and src not in msg:
        msg = f"{src}: {msg}"
    if failed is not None and failed.reason.startswith("cached failure"):
        msg += " [recorded failure: reruns when the kernel, its files, the options or the pass change]"
    return msg


def _kernel_stats(kr: KernelResult, resolved, stages: bool) -> dict[str, Any]:
    k = kr.kernel
    units = []
    for u in kr.units:
        units.append({
            "unit": u.unit.name, "core": u.unit.core, "output": u.unit.data["output"], "host": u.unit.host_hash,
            "final": u.final, "seconds": u.seconds, "repairs": u.repairs, "consts": u.outputs.get("consts", []),
            "cache_hits": len(u.cached), "executed": len(u.executed), "summary": summarize(u),
            "steps": [s.to_json() for s in u.steps],
        })
    return {"tusk_stats": STATS_FORMAT, "kernel": k.name, "source": str(k.path), "source_sha256": k.digest,
            "format": k.fmt, "cores": k.ncores, "files": file_digests(k), "stages": stages,
            "pipeline": [s.spec for s in resolved.steps],
            "not_available": [label for label, _ in resolved.unavailable], "units": units}


def summarize(u: UnitReport) -> dict[str, Any]:
    """The summary-table figures of one unit; None where the pipeline has no such stat."""
    unroll = [s for s in u.steps if s.name in UNROLL_PASSES]
    rot = [s for s in u.steps if s.name in ROTATION_PASSES]
    rotations = None
    for s in rot:
        for key in ("rotations", "rotated", "n_rotated", "num_rotated"):
            if isinstance(s.stats.get(key), (int, float)):
                rotations = (rotations or 0) + s.stats[key]
                break
    before = next((s.stats.get("makespan_before") for s in rot if "makespan_before" in s.stats), None)
    after = next((s.stats.get("makespan_after") for s in reversed(rot) if "makespan_after" in s.stats), None)
    return {
        "insts_before_unroll": unroll[0].insts_in if unroll else None,
        "insts_after_unroll": unroll[-1].insts_out if unroll else None,
        "rotations": rotations, "makespan_before": before, "makespan_after": after,
        "cache_hits": len(u.cached), "steps": len(u.steps), "seconds": u.seconds,
        "pass_seconds": sum(s.seconds for s in u.steps if s.status == "executed"),
    }


def _write_atomic(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def _remove_dir(p: Path) -> None:
    if p.exists():
        old = p.with_name(f"{OLD_PREFIX}{p.name}-{os.getpid()}-{uuid.uuid4().hex[:8]}")
        try:
            os.rename(p, old)
        except OSError:
            old = p
        shutil.rmtree(old, ignore_errors=True)


def _swap_dir(staging: Path, dest: Path) -> None:
    """Put ``staging`` in place of ``dest`` (another build may be swapping the same kernel)."""
    for _ in range(20):
        old = None
        if dest.exists():
            old = dest.with_name(f"{OLD_PREFIX}{dest.name}-{os.getpid()}-{uuid.uuid4().hex[:8]}")
            try:
                os.rename(dest, old)
            except FileNotFoundError:
                old = None  # the other build moved it first
        try:
            os.rename(staging, dest)
        except OSError:
            if old is not None:
                shutil.rmtree(old, ignore_errors=True)
            continue  # someone put a new dest in between: move it aside again
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
        return
    shutil.rmtree(staging, ignore_errors=True)
    raise TuskError(f"could not move the output of {dest.name} into place (concurrent writers?)")


def _clean_leftovers(out: Path, age: float = 3600.0) -> None:
    """Remove staging directories of builds that died more than ``age`` seconds ago."""
    now = time.time()
    for p in out.iterdir():
        if p.name.startswith((STAGING_PREFIX, OLD_PREFIX, ".tusk-nocache-")) and p.is_dir():
            try:
                if now - p.stat().st_mtime > age:
                    shutil.rmtree(p, ignore_errors=True)
            except OSError:
                pass
