"""The output directory: each kernel's results assembled aside and moved into place whole.

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

The directory is assembled aside (``OUT/.tusk-staging-*``, which is also
the artifact directory the passes stage files into while the build runs)
and moved into place only when every core of the kernel succeeded, so
nothing is ever half-written and an interrupted build leaves nothing in
``OUT/<kernel>``.  Each staging directory names its owner (host, process);
the next build removes those of processes that are gone.  A kernel that fails by its own fault (a pass refused it, its
file cannot be read) loses the result of an earlier build (it would be
stale); a failure that is not the kernel's (the cache, the cluster, the file
system) keeps it.  A kernel whose final hashes, input files and staged
artifacts match its existing ``stats.json`` is not rewritten (only its
stats record is refreshed).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable

from tusk.ir.errors import ENVIRONMENT, INPUT, EnvError, InputError, TuskError
from tusk.workflows.out_lock import LOCK_FILE

if TYPE_CHECKING:  # at run time imported where used: the reuse of outputs (tusk.workflows.reuse) imports this
    from tusk.workflows.build_report import BuildUnit, UnitReport
    from tusk.workflows.compile import KernelResult  # module without numpy, the store or the passes
    from tusk.workflows.kernels import Kernel

STATS_FILE = "stats.json"
STATS_FORMAT = 2
TRANSLATE = "translate_nki_ast_to_bir"
STAGING_PREFIX = ".tusk-staging-"
OLD_PREFIX = ".tusk-old-"
NOCACHE_PREFIX = ".tusk-nocache-"
TEMP_PREFIXES = (STAGING_PREFIX, OLD_PREFIX, NOCACHE_PREFIX)


def output_problem(dest: Path, src: Path, k: Kernel) -> str | None:
    """Why OUT/<kernel> must not be written, or None.

    Swapping the kernel's directory into place replaces ``dest`` whole, and
    translate stages files into it while the build runs.
    """
    if dest.name.startswith(TEMP_PREFIXES) or dest.name == LOCK_FILE:
        return f"the kernel name {dest.name!r} is reserved for Tusk's temporary directories; rename the file"
    if dest.is_symlink():
        return f"the output directory {dest} is a symbolic link; not writing through it"
    for p in (src, *([k.origin] if k.origin else []), k.path, *k.refs):
        real = Path(os.path.realpath(p))
        inside_input_ok = p == src  # e.g. ./tusk-out/<kernel> when compiling "."
        if real == dest or real.is_relative_to(dest) or (not inside_input_ok and dest.is_relative_to(real)):
            what = "the input directory" if p == src else f"the input file {p}"
            return f"the output directory {dest} would overlap {what}; choose another -o"
    if dest.exists() and not _is_tusk_output(dest):
        return f"{dest} exists and is not a Tusk output (no {STATS_FILE}); not replacing it"
    return None


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


def previous_parts(out: Path, unit: BuildUnit) -> dict[str, dict]:
    data = _read_stats(out / unit.kernel / STATS_FILE) or {}
    for u in data.get("units", []):
        if u.get("unit") == unit.name:
            return {s["label"]: s.get("key_parts", {}) for s in u.get("steps", [])}
    return {}


class OutputWriter:
    """Has each unit's final module written aside as it completes; moves whole kernel directories in place."""

    def __init__(self, out: Path, store, steps, stages: bool | list[str], flatten: bool = False):
        self.out = out
        self.store = store
        self.steps = steps
        self.stages = sorted(set(stages)) if isinstance(stages, (list, tuple, set)) else bool(stages)  # names: those
        self.flatten = flatten
        self.started = time.time()
        self.staging: dict[str, Path] = {}
        self.up_to_date: dict[str, bool] = {}

    def remove(self, kernel: str) -> None:
        """Remove a failed kernel's earlier result (passes staged this build's files in its staging dir)."""
        dest = self.out / kernel
        if _is_tusk_output(dest):
            _remove_dir(dest)

    def discard_staging(self) -> None:
        for p in self.staging.values():
            shutil.rmtree(p, ignore_errors=True)
        self.staging.clear()

    def staging_for(self, kernel: str) -> Path:
        """The kernel's staging directory (made on first use): its artifact directory during the build."""
        p = self.staging.get(kernel)
        if p is None:
            p = owned_dir(self.out, STAGING_PREFIX, kernel)
            self.staging[kernel] = p
        return p

    def _is_up_to_date(self, ur: UnitReport, final: str) -> dict | None:
        """The unit's record in the existing stats.json if its output (and every staged artifact) is current."""
        unit = ur.unit
        dest = self.out / unit.kernel
        data = _read_stats(dest / STATS_FILE)
        if not data or data.get("files") != unit.files or data.get("stages") != self.stages \
                or bool(data.get("flatten")) != self.flatten:
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
                # a timing step that failed (a full disk) lost figures of stats.json and timeline.json: the
                # next build measures again and rewrites them, even though the module is the same
                lost = any(isinstance(t, dict) and t.get("status") == "failed" for t in u.get("timings") or [])
                return u if ok and not lost else None
        return None

    def on_final(self, ur: UnitReport, final: str) -> list[tuple[str, Path, str]] | None:
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
        staging = self.staging_for(unit.kernel)
        art = str(self.out / unit.kernel)  # where the outputs end up (staging is renamed to it)
        # the final output, flattened on request (--flatten: the kernel as functions[0] "sg0000"); stages never
        items: list[tuple] = [(final, staging / unit.data["output"], art, *(["flatten"] if self.flatten else []))]
        if self.stages:
            d = staging / "stages" / (unit.name.replace("[", "_").replace("]", ""))
            d.mkdir(parents=True, exist_ok=True)
            for n, s in enumerate(ur.steps, 1):
                if self.stages is not True and s.label not in self.stages and s.name not in self.stages:
                    continue
                items.append((s.output, d / f"{n:02d}-{s.label.replace('#', '_')}.bir.json", art))
        return items

    def timeline_task(self, reports: list[UnitReport]) -> tuple[Callable, tuple, str] | None:
        """The build's task that writes the kernel's timeline.json into its staging directory (every unit
        of the kernel done and built; see ``Build.on_kernel_done``), or None: the report writes or keeps it."""
        from tusk.workflows import tasks
        from tusk.workflows.trace import TIMELINE_FILE

        kernel = reports[0].unit.kernel
        staging = self.staging.get(kernel)
        if staging is None or not all(u.ok for u in reports) or all(self.up_to_date.get(u.unit.name) for u in reports):
            return None
        units = [(u.unit.name, [t.to_json() for t in u.timings]) for u in reports]
        if not any(timed for _, timed in units):
            return None
        return tasks.write_timeline, (self.store.url, kernel, units, str(staging / TIMELINE_FILE)), "write_timeline"

    def finish_kernel(self, kr: KernelResult, resolved) -> None:
        """Move the kernel's staged directory into place, or on failure leave or remove the old one."""
        k = kr.kernel
        failed = [u for u in kr.units if not u.ok]
        staging = self.staging.pop(k.name, None)
        kr.stats = _kernel_stats(kr, resolved, self.stages)
        kr.stats["flatten"] = self.flatten
        try:
            if failed or not kr.units:
                kr.error = "; ".join(dict.fromkeys(_message(u) for u in failed)) or "nothing was built"
                kr.fault = next((u.fault for u in failed if u.fault == ENVIRONMENT), None) or \
                    next((u.fault for u in failed if u.fault), INPUT)
                kr.traceback = "\n".join(u.traceback for u in failed if u.traceback)
                kr.keep = kr.fault == ENVIRONMENT
                if not kr.keep:
                    self.remove(k.name)  # the kernel is bad now: no stale result of an earlier build
            else:
                self._write(kr, staging)
                staging = None
        except (OSError, TuskError) as e:  # nothing was moved: the earlier output stays
            kr.error, kr.keep = f"{k.source}: writing the outputs failed: {e}", True
            kr.fault = ENVIRONMENT if isinstance(e, (OSError, EnvError)) else INPUT
        finally:
            if staging is not None:
                shutil.rmtree(staging, ignore_errors=True)
        if kr.error:
            kr.stats["error"] = kr.error

    def _write(self, kr: KernelResult, staging: Path | None) -> None:
        dest = self.out / kr.kernel.name
        artifacts = self._artifacts(kr)
        if staging is None or all(self.up_to_date.get(u.unit.name) for u in kr.units):
            # every unit and artifact up to date: the record is refreshed only where the build's steps differ
            # (another pipeline reaching the same output); a plain no-op rewrites nothing
            kr.stats["artifacts"] = {rel: (dest / rel).stat().st_size for rel in artifacts}
            if _steps_of(_read_stats(dest / STATS_FILE)) != _steps_of(kr.stats):
                write_atomic(dest / STATS_FILE, _json(kr.stats))
            if staging is not None:
                shutil.rmtree(staging, ignore_errors=True)
            return
        for u in kr.units:
            if self.up_to_date.get(u.unit.name):
                try:
                    shutil.copy2(dest / u.unit.data["output"], staging / u.unit.data["output"])
                except OSError:  # moved away meanwhile (a concurrent build): write it again
                    from tusk.ir import bir_json

                    bir_json.save(self.store.load(u.final), staging / u.unit.data["output"], flatten=self.flatten)
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
                raise InputError(f"{what} {rel} would overwrite an output of the build")
            if rel in wanted and os.path.realpath(wanted[rel]) != os.path.realpath(src):
                raise InputError(f"two files would be staged as {rel}: {wanted[rel]} and {src}")
            wanted[rel] = src

        add(k.path.name, k.path, "the kernel file")
        for u in kr.units:
            for s in u.steps:
                if s.name == TRANSLATE:
                    for rel, src in (s.stats.get("artifacts") or {}).items():  # sources: relative to the kernel's
                        add(rel, k.path.parent / src, "the staged file")                  # directory, or absolute
        for u in kr.units:
            for rel in u.outputs.get("consts", []):
                if os.path.isabs(rel) or rel in wanted:
                    continue  # an absolute const path is used where it is
                if ".." in Path(rel).parts:
                    raise InputError(f"{u.unit.data['output']} names const file {rel}, outside its directory")
                src = k.path.parent / rel
                if not src.is_file():
                    raise InputError(f"{u.unit.data['output']} names const file {rel}, which was not found "
                                    f"(looked for {src})")
                add(rel, src, "the const file")
        return wanted

    def _stage_artifacts(self, wanted: dict[str, Path], staging: Path, dest: Path) -> dict[str, int]:
        """Copy the artifacts into the staging directory; returns name -> size (recorded in stats.json).

        Files a pass wrote into its artifact directory during this build are
        there already (the staging directory is that directory).
        """
        (staging / OWNER_FILE).unlink(missing_ok=True)
        sizes = {}
        for rel, src in wanted.items():
            target = _target(staging, rel)
            try:
                if not (target.exists() and os.path.samefile(src, target)):  # a traced kernel is written there
                    shutil.copy2(src, target)
            except OSError as e:
                raise EnvError(f"cannot stage {src} as {rel}: {e.strerror or e}") from None
            sizes[rel] = target.stat().st_size
        return sizes


def _steps_of(stats: dict | None) -> Any:
    """What a kernel's record says about how it was built, apart from what ran when: per unit the final
    hash and each step's action key."""
    if not stats:
        return None
    return [stats.get("pipeline"), stats.get("artifacts"),
            [(u.get("unit"), u.get("final"), [s.get("key") for s in u.get("steps", [])]) for u in stats.get("units", [])]]


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


def unit_stats(u: UnitReport) -> dict[str, Any]:
    """One unit's record in its kernel's stats.json."""
    return {
        "unit": u.unit.name, "core": u.unit.core, "output": u.unit.data["output"], "host": u.unit.host_hash,
        "final": u.final, "seconds": u.seconds, "repairs": u.repairs, "consts": u.outputs.get("consts", []),
        "cache_hits": len(u.cached), "executed": len(u.executed), "summary": summarize(u),
        "steps": [s.to_json() for s in u.steps], "timings": [t.to_json() for t in u.timings],
    }


def _kernel_stats(kr: KernelResult, resolved, stages: bool | list[str]) -> dict[str, Any]:
    from tusk.workflows.kernels import file_digests

    k = kr.kernel
    units = [unit_stats(u) for u in kr.units]
    stats = {"tusk_stats": STATS_FORMAT, "kernel": k.name, "source": str(k.source),
             "source_sha256": k.trace.get("py_sha256", k.digest) if k.origin else k.digest,
             "format": k.fmt, "cores": k.ncores, "files": file_digests(k), "stages": stages,
             "pipeline": [s.spec for s in resolved.steps],
             "not_available": [label for label, _ in resolved.unavailable], "units": units}
    if k.origin:  # traced from Python (tusk.toml [kernels.NAME]): how, and whether it ran in this build
        stats["trace"] = dict(k.trace)
    return stats


def summarize(u: UnitReport) -> dict[str, Any]:
    """The summary-table figures of one unit; None where the pipeline has no such stat."""
    from tusk.workflows.pipeline import ROTATION_PASSES, UNROLL_PASSES

    unroll = [s for s in u.steps if s.name in UNROLL_PASSES]
    rot = [s for s in u.steps if s.name in ROTATION_PASSES]
    rotations = None
    for s in rot:
        for key in ("rotations", "rotated", "n_rotated", "num_rotated"):
            if isinstance(s.stats.get(key), (int, float)):
                rotations = (rotations or 0) + s.stats[key]
                break
    # the timing steps' figures (tusk.workflows.timings): cycles, rounded as the passes once reported them
    before, after = (None if v is None else round(v) for v in (u.makespan("makespan_before"),
                                                               u.makespan("makespan_after")))
    return {
        "insts_before_unroll": unroll[0].insts_in if unroll else None,
        "insts_after_unroll": unroll[-1].insts_out if unroll else None,
        "rotations": rotations, "makespan_before": before, "makespan_after": after, **explained(u),
        "cache_hits": len(u.cached), "steps": len(u.steps), "seconds": u.seconds,
        "pass_seconds": sum(s.seconds for s in u.steps if s.status == "executed"),
    }


def explained(u: UnitReport) -> dict[str, Any]:
    """What limits the final module (tusk.sim.explain, cycles): its lower bound, the binding resource and the
    utilisation per engine; None each when it was not timed."""
    e = next((t.explain for t in u.timings if t.summary == "makespan_after" and t.explain), None)
    if e is None:
        e = next((t.explain for t in reversed(u.timings) if t.explain), None)
    if e is None:
        return {"lower_bound": None, "binding": None, "efficiency": None, "utilisation": None, "unit": None}
    return {"lower_bound": round(e["lower_bound"]["cycles"]), "binding": e["binding"],
            "efficiency": e["efficiency"], "utilisation": e["utilisation"], "unit": e["unit"]}


def write_atomic(path: Path, data: bytes | Iterable[bytes]) -> None:
    """Write aside (``data``, or its pieces in turn), then rename into place: readers see the old file or
    the new one; a failure (a full disk) leaves neither a half file nor the temporary."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}")
    try:
        with open(tmp, "wb") as fh:
            if isinstance(data, (bytes, bytearray, memoryview)):
                fh.write(data)
            else:
                fh.writelines(data)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


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
    raise EnvError(f"could not move the output of {dest.name} into place (concurrent writers?)")


OWNER_FILE = ".tusk-owner"


def owned_dir(out: Path, prefix: str, label: str) -> Path:
    """A fresh temporary directory in OUT marked with its owner (host and process), for clean_leftovers."""
    safe = "".join(c if c.isalnum() or c in "._-" else "_" for c in label)[:64]
    p = out / f"{prefix}{safe}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    p.mkdir()
    (p / OWNER_FILE).write_text(json.dumps({"host": socket.gethostname(), "pid": os.getpid(),
                                            "started": time.time()}))
    return p


def _owner_gone(p: Path, now: float, age: float) -> bool:
    """True when the build that made temporary directory ``p`` is over: its process is gone (same host),
    or it is older than ``age`` seconds (another host, or no owner record)."""
    try:
        owner = json.loads((p / OWNER_FILE).read_text())
        if owner.get("host") == socket.gethostname() and isinstance(owner.get("pid"), int):
            if owner["pid"] == os.getpid():
                return False
            try:
                os.kill(owner["pid"], 0)
            except ProcessLookupError:
                return True
            except PermissionError:
                pass  # alive, someone else's
    except (OSError, ValueError, AttributeError):
        pass
    try:
        return now - p.stat().st_mtime > age
    except OSError:
        return False


def remove_own_temp_dirs(out: Path) -> None:
    """Remove the staging directories this process made in OUT (a build ended by its watchdog); an output
    set aside while its replacement moves in is left for the next build to settle."""
    mine = f"-{os.getpid()}-"
    try:
        found = [p for p in out.iterdir() if p.name.startswith((STAGING_PREFIX, NOCACHE_PREFIX)) and mine in p.name]
    except OSError:
        return
    for p in found:
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p, ignore_errors=True)


def clean_leftovers(out: Path, age: float = 3600.0) -> None:
    """Remove the temporary directories of builds that are over (killed, crashed, interrupted)."""
    now = time.time()
    for p in out.iterdir():
        if p.name.startswith(TEMP_PREFIXES) and p.is_dir() and not p.is_symlink() and _owner_gone(p, now, age):
            shutil.rmtree(p, ignore_errors=True)
