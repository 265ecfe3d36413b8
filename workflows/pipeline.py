"""The pass pipeline: an ordered list of (pass name, options), as the backend builds it.

The default follows the backend's pre-codegen order (seed pages on
TranslateNKIASTToBIR and AddressRotation)::

    translate_nki_ast_to_bir, raise_loops,         (raise_loops: Tusk's; KLR's counted register loops
                                                    become static loops the unroller can flatten)
    heuristic_unroll, unroll,
    address_rotation_psum, address_rotation_sb, address_rotation_dram,   (after each coloring allocator)
    clear_inst_deps, build_fdeps,                                         (edges for the rotated addresses)
    schedule,                                      (Tusk's list scheduler in place of the seed's
                                                    separate_load_and_compute + post_sched)
    address_rotation_psum_post_schedule, address_rotation_sb              (rotate again after scheduling;
                                                    where they move a buffer they rebuild that function's
                                                    edges, so dependence analysis runs once per build)

Only registered passes run (``tusk.stages.REGISTRY``); backend passes Tusk
does not have yet are reported as "not available yet".
A pass that appears twice is addressed as ``name`` (every occurrence) or
``name#2`` (the second one).

Changing it:

* ``--set pass.option=value`` sets an option (typed by the pass's fields); ``--set
  pass.enabled=false`` drops a step (or, for a pass that has an ``enabled``
  option of its own, sets that option).
* ``--pipeline FILE`` reads a TOML file::

      [[step]]
      pass = "unroll"              # a registered name, or "package.module:Class"
      options = { max_unroll = 8 } # optional
      enabled = true               # optional

  A ``"module:Class"`` name lets a pipeline use a pass that is not in the
  registry (tests do this); the class's own ``name`` labels its tasks.
"""

from __future__ import annotations

import dataclasses
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tusk import stages
from tusk.cache.keys import code_digest
from tusk.ir.errors import TuskError, UsageError

DEFAULT_ORDER: tuple[str, ...] = (
    "translate_nki_ast_to_bir",
    "raise_loops",
    "heuristic_unroll",
    "unroll",
    "address_rotation_psum",
    "address_rotation_sb",
    "address_rotation_dram",
    "clear_inst_deps",
    "build_fdeps",
    "schedule",
    "address_rotation_psum_post_schedule",
    "address_rotation_sb",
)
BACKEND_NAMES = frozenset(DEFAULT_ORDER)
UNROLL_PASSES = frozenset({"heuristic_unroll", "unroll", "full_unroll"})
ROTATION_PASSES = frozenset({"address_rotation_psum", "address_rotation_sb", "address_rotation_dram",
                             "address_rotation_psum_post_schedule"})


@dataclass
class Entry:
    """One step as written: a pass reference, raw option values, whether it runs."""

    ref: str
    options: dict[str, Any] = field(default_factory=dict)
    enabled: bool = True
    label: str = ""


@dataclass(frozen=True)
class Step:
    """One step ready to run: everything a worker needs, all JSON-able, and the key parts."""

    label: str
    name: str            # the pass's registered name (task keys start with it)
    target: str          # "module:Class" the worker imports
    version: str
    code: str            # digest of the pass's source file
    options: dict[str, Any]   # typed option values (shallow; the worker rebuilds Options(**options))
    spec: str            # options_spec: name{a=1 b=x}
    splittable: bool
    reads_files: bool = False  # the pass reads files the module names (translate): see Pass.reads_files
    splits_ahead_of: tuple[str, ...] = ()  # see Pass.split_ahead (no part of the key: the output is the same)

    def key_parts(self) -> dict[str, Any]:
        return {"pass": self.name, "version": self.version, "code": self.code,
                "options": {k: _jsonable(v) for k, v in self.options.items()}}

    def task_spec(self) -> dict[str, Any]:
        return {"label": self.label, "name": self.name, "target": self.target, "options": self.options,
                "version": self.version, "code": self.code, "reads_files": self.reads_files}


def _jsonable(v: Any) -> Any:
    if dataclasses.is_dataclass(v) and not isinstance(v, type):
        return dataclasses.asdict(v)
    return v


@dataclass
class Resolved:
    steps: list[Step]
    unavailable: list[tuple[str, str]]  # (label, reason)
    warnings: list[str] = field(default_factory=list)


class PipelineFileError(UsageError):
    """A --pipeline file that cannot be read or used: the command's fault (exit 2), as a bad tusk.toml is."""


def default_pipeline() -> list[Entry]:
    return _labelled([Entry(name) for name in DEFAULT_ORDER])


def display_name(ref: str) -> str:
    """The pass name a reference stands for (a "module:Class" reference: the class's ``name``)."""
    if ":" not in ref:
        return ref
    try:
        return stages.load_external(ref).name
    except TuskError:
        return _short(ref)


def _labelled(entries: list[Entry]) -> list[Entry]:
    seen: dict[str, int] = {}
    for e in entries:
        name = display_name(e.ref)
        seen[name] = seen.get(name, 0) + 1
        e.label = name if seen[name] == 1 else f"{name}#{seen[name]}"
    return entries


def load_pipeline(path: str | Path) -> list[Entry]:
    """Read a TOML pipeline file (see the module docstring)."""
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise PipelineFileError(f"cannot read pipeline file: {e.strerror}", file=str(path)) from None
    except tomllib.TOMLDecodeError as e:
        raise PipelineFileError(f"malformed TOML: {e}", file=str(path)) from None
    extra = sorted(set(data) - {"step", "steps"})
    if extra:  # a `[[stepp]]` typo would otherwise drop that step from the pipeline without a word
        raise PipelineFileError(f"unknown top-level keys {extra} (a pipeline file holds only [[step]] tables)",
                                file=str(path))
    steps = data.get("step", data.get("steps"))
    if not isinstance(steps, list):
        raise PipelineFileError("a pipeline file needs [[step]] tables", file=str(path))
    entries = []
    for i, s in enumerate(steps):
        where = f"step[{i}]"
        if not isinstance(s, dict):
            raise PipelineFileError("expected a table", file=str(path), where=where)
        ref = s.get("pass", s.get("name"))
        if not isinstance(ref, str) or not ref:
            raise PipelineFileError("missing 'pass'", file=str(path), where=where)
        opts = s.get("options", {})
        if not isinstance(opts, dict):
            raise PipelineFileError("'options' must be a table", file=str(path), where=where)
        enabled = s.get("enabled", True)
        if not isinstance(enabled, bool):
            raise PipelineFileError("'enabled' must be true or false", file=str(path), where=where)
        unknown = set(s) - {"pass", "name", "options", "enabled"}
        if unknown:
            raise PipelineFileError(f"unknown keys {sorted(unknown)}", file=str(path), where=where)
        if ":" not in ref and ref not in stages.REGISTRY and ref not in BACKEND_NAMES:
            raise PipelineFileError(unknown_pass_text(ref), file=str(path), where=where)
        if ref in stages.REGISTRY and opts:
            try:  # the options' names and types, said here with the file and the step
                stages.pass_class(ref).with_options(dict(opts))
            except UsageError as e:
                raise PipelineFileError(str(e), file=str(path), where=where) from None
        entries.append(Entry(ref, dict(opts), enabled))
    return _labelled(entries)


def apply_sets(entries: list[Entry], assignments: list[str]) -> list[Entry]:
    """Apply ``pass.option=value`` (or ``pass#2.option=value``) assignments in order."""
    for text in assignments:
        if "=" not in text or "." not in text.split("=", 1)[0]:
            raise UsageError(f"--set expects pass.option=value, got {text!r}")
        lhs, value = text.split("=", 1)
        target, option = lhs.rsplit(".", 1)
        target, option = target.strip(), option.strip()
        hits = [e for e in entries
                if target in (e.label, e.ref, _short(e.ref)) or ("#" not in target and display_name(e.ref) == target)]
        if not hits:
            labels = ", ".join(e.label for e in entries)
            raise UsageError(f"--set {text}: the pipeline has no pass {target!r} (passes: {labels})")
        for e in hits:
            if option == "enabled" and "enabled" not in _option_names(e.ref):
                low = value.strip().lower()
                if low not in ("true", "false", "1", "0", "yes", "no", "on", "off"):
                    raise UsageError(f"--set {text}: enabled expects true or false")
                e.enabled = low in ("true", "1", "yes", "on")
            else:
                e.options[option] = value
    return entries


def apply_defaults(entries: list[Entry], defaults: list[tuple[str, str, Any]]) -> list[Entry]:
    """Fill ``(pass, option, value)`` defaults (settings such as MAXHU) where the entry sets none."""
    for pass_name, option, value in defaults:
        for e in entries:
            if display_name(e.ref) == pass_name and option not in e.options:
                e.options[option] = value
    return entries


def _option_names(ref: str) -> set[str]:
    """Option names of the pass ``ref`` stands for (empty when it cannot be loaded)."""
    try:
        cls = stages.load_external(ref) if ":" in ref else stages.pass_class(ref)
    except TuskError:
        return set()
    return {o.name for o in cls.options()}


def _short(ref: str) -> str:
    return ref.rsplit(":", 1)[-1] if ":" in ref else ref


def resolve(entries: list[Entry]) -> Resolved:
    """Turn entries into runnable steps; passes that do not exist yet are listed, not run."""
    steps: list[Step] = []
    unavailable: list[tuple[str, str]] = []
    warnings: list[str] = []
    for e in entries:
        if not e.enabled:
            unavailable.append((e.label, "disabled"))
            continue
        step = _resolve_one(e)
        if isinstance(step, Step):
            steps.append(step)
            continue
        unavailable.append((e.label, step))
        if e.options:  # a --set (or pipeline option) that cannot take effect: say so
            warnings.append(f"options {', '.join(sorted(e.options))} of {e.label} are not used: the pass is {step}")
    return Resolved(steps, unavailable, warnings)


def unknown_pass_text(ref: str) -> str:
    """``unknown pass 'unrol' (did you mean 'unroll'? known: ...)``."""
    import difflib

    known = sorted(stages.REGISTRY)
    close = difflib.get_close_matches(ref, known, n=1)
    return f"unknown pass {ref!r} (" + (f"did you mean {close[0]!r}? " if close else "") + f"known: {', '.join(known)})"


def _resolve_one(e: Entry) -> Step | str:
    """The step for ``e``, or why it cannot run yet (a backend pass this checkout does not have)."""
    if ":" in e.ref:
        cls = stages.load_external(e.ref)
    elif e.ref not in stages.REGISTRY:
        if e.ref in BACKEND_NAMES:
            return "not available yet (not registered)"
        raise stages.UnknownPass(unknown_pass_text(e.ref))
    else:
        cls = stages.pass_class(e.ref)
    p = cls.with_options(e.options)
    return Step(label=e.label, name=cls.name, target=stages.target_of(cls), version=str(cls.version),
                code=code_digest(cls), options=p.option_values(), spec=str(p), splittable=cls.splittable,
                reads_files=cls.reads_files, splits_ahead_of=tuple(sorted(cls.splits_ahead_of)))
