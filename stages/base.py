"""The pass contract: a pass is a frozen dataclass whose fields are its options.

::

    @dataclass(frozen=True)
    class Unroll(Pass):
        \"\"\"Flatten static loops.\"\"\"

        name = "unroll"            # the backend's registered pass name (users search for it)
        version = "3"              # bump whenever the output for a given input can change
        splittable = True          # run/split/merge below; the build fans the parts out
        reads_files = False        # True: run() reads files the module only names (translate)

        loops: Literal["all", "marked"] = option("all", "which static loops to flatten")

        def run(self, module): ...  -> (new module, stats)

* ``run(module) -> (module, stats)`` depends only on the module and the
  pass's fields: no state on ``self`` (the instance is frozen), no
  environment, no globals.  It never mutates ``module``; ``stats`` is a
  small JSON-able dict of counts.
* A ``splittable`` pass also implements ``split(module)`` (independent part
  modules, or None to run whole) and ``merge(module, parts, part_stats)``;
  the merged result must equal ``run``'s (tests compare content hashes).
* ``str(p)`` is the deterministic spec ``name{opt=value ...}`` (every field,
  in declaration order); :func:`tusk.stages.parse_pass` reads it back, so
  ``parse_pass(str(p)) == p``.
* Options are typed by their annotations (``bool``, ``int``, ``float``,
  ``str``, ``Literal[...]``, ``X | None``) and checked when the pass is
  built: a wrong value is an :class:`OptionError` naming pass and option.

Every setting that changes output is a field (or a build setting that the
build puts into the module and the action key, such as the target arch), so
the action key of a step, which covers the fields, covers everything the
pass depends on besides the code (see ``tusk.cache.keys.code_digest``).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import re
import types
import typing
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, Mapping, Union

from tusk.ir.errors import UsageError
from tusk.ir.module import Module

Stats = dict[str, Any]


class OptionError(UsageError):
    """A pass option with a wrong name or value (a usage error, found before anything runs)."""


def option(default: Any, help: str) -> Any:
    """A pass option: its default and the one line ``tusk passes`` shows."""
    return dataclasses.field(default=default, metadata={"help": help})


@dataclass(frozen=True)
class OptionInfo:
    name: str
    type: str        # as users write it: int, bool, "all" | "marked", int | none ...
    default: Any
    help: str


@dataclass(frozen=True)
class Slice:
    """A part of a split given by reference: ``Pass.take(base, spec)``, where ``base`` is the split's input
    (``base`` None) or the ``base``-th item of the split's list (a module part).  The build hands the part's
    task the reference and the task takes the part itself: the split hashes and stores nothing for it, and
    the part is cut where it runs, in parallel (cutting and storing 4 parts of a 1.2M-row function was half
    of a serial split of 0.3-0.5 s).  ``spec`` is JSON (it names the part in its action key, with the base's
    content hash); ``size`` is its instructions."""

    spec: Mapping[str, Any]
    size: int
    base: int | None = None


def materialized(p: Pass, module: Module, items: list[Module | Slice] | None) -> list[Module] | None:
    """A split's items as modules (each slice taken), in order."""
    if items is None:
        return None
    out: list[Module] = []
    for x in items:
        if isinstance(x, Slice):
            base = module if x.base is None else items[x.base]
            assert isinstance(base, Module), "a slice's base is a module part"
            x = p.take(base, x.spec)
        out.append(x)
    return out


@dataclass(frozen=True)
class Pass:
    """Base of every pass; see the module docstring for the contract."""

    name: ClassVar[str] = ""
    version: ClassVar[str] = "1"
    reads_files: ClassVar[bool] = False
    splittable: ClassVar[bool] = False
    # passes that may still be running when this one splits: see split_ahead
    splits_ahead_of: ClassVar[frozenset[str]] = frozenset()

    def __post_init__(self) -> None:
        hints = _hints(type(self))
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if not _accepts(hints[f.name], value):
                raise OptionError(f"option {self.name}.{f.name} expects {_type_text(hints[f.name])}, "
                                  f"got {value!r}")

    # ------------------------------------------------------------ the work
    def run(self, module: Module) -> tuple[Module, Stats]:
        raise NotImplementedError

    def split(self, module: Module) -> list[Module] | None:
        """Independent parts of the work (``splittable`` passes), or None to run whole."""
        return None

    def merge(self, module: Module, parts: list[Module], part_stats: list[Stats]) -> tuple[Module, Stats]:
        raise NotImplementedError(f"{self.name} does not split")

    def split_refs(self, module: Module) -> list[Module | Slice] | None:
        """``split`` as the build asks for it: a part may be a :class:`Slice`, which the part's task takes
        (``take``).  ``materialized(self, module, split_refs(module))`` is ``split(module)``."""
        parts = self.split(module)
        return None if parts is None else list(parts)

    def take(self, base: Module, spec: Mapping[str, Any]) -> Module:
        """The part a :class:`Slice` of this pass names, cut from ``base``."""
        raise NotImplementedError(f"{self.name} gives no slices")

    def split_ahead(self, module: Module) -> list[Module | Slice] | None:
        """The parts of ``split_refs(before(module))``, cut from ``module`` itself while the pass ``before`` (one
        of :attr:`splits_ahead_of`, running just before this one) still works on it; None where they would
        differ.  The build runs them beside ``before``'s own parts and merges them into ``before``'s output:
        ``merge(before(module), parts)`` must equal ``run(before(module))`` (tests compare content hashes)."""
        return None

    def run_split(self, module: Module) -> tuple[Module, Stats]:
        """The split/run/merge path, serially (tests compare it with ``run``)."""
        parts = self.split(module)
        if parts is None:
            return self.run(module)
        results = [self.run(p) for p in parts]
        return self.merge(module, [m for m, _ in results], [s for _, s in results])

    @property
    def log(self) -> logging.Logger:
        return logging.getLogger(f"tusk.{self.name}")

    # ------------------------------------------------------------ options
    @classmethod
    def options(cls) -> list[OptionInfo]:
        hints = _hints(cls)
        return [OptionInfo(f.name, _type_text(hints[f.name]), f.default, f.metadata.get("help", ""))
                for f in dataclasses.fields(cls)]

    @classmethod
    def with_options(cls, values: Mapping[str, Any]) -> "Pass":
        """The pass with ``values`` (text from the command line, or typed values from TOML/JSON)."""
        hints = _hints(cls)
        known = {f.name for f in dataclasses.fields(cls)}
        typed = {}
        for key, value in values.items():
            if key not in known:
                raise OptionError(f"pass {cls.name} has no option {key!r} (options: "
                                  f"{', '.join(sorted(known)) or 'none'})")
            typed[key] = _coerce(hints[key], value, f"{cls.name}.{key}")
        return cls(**typed)

    def option_values(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    def __str__(self) -> str:
        fs = dataclasses.fields(self)
        if not fs:
            return self.name
        return f"{self.name}{{{' '.join(f'{f.name}={format_value(getattr(self, f.name))}' for f in fs)}}}"


# ---------------------------------------------------------------- typed values

_BARE = re.compile(r"[A-Za-z0-9_.:/+\-]+")
_TRUE, _FALSE = ("true", "1", "yes", "on"), ("false", "0", "no", "off")


def format_value(v: Any) -> str:
    """One option value in a spec: parsed back exactly by :func:`parse_spec` + the option's type."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if v is None:
        return "none"
    if isinstance(v, (int, float)):
        return repr(v)
    text = str(v)
    if _BARE.fullmatch(text) and text.lower() != "none":
        return text
    return json.dumps(text)


_ITEM = re.compile(r'\s*([A-Za-z_]\w*)=("(?:[^"\\]|\\.)*"|[^\s"{}]*)')


def parse_spec(spec: str) -> tuple[str, dict[str, str]]:
    """``name{a=1 b="x y"}`` -> (name, {"a": "1", "b": "x y"}); values stay text."""
    spec = spec.strip()
    if "{" not in spec:
        return spec, {}
    if not spec.endswith("}"):
        raise OptionError(f"malformed pass spec {spec!r}: expected name{{option=value ...}}")
    name, body = spec[:-1].split("{", 1)
    out: dict[str, str] = {}
    pos = 0
    while body[pos:].strip():
        m = _ITEM.match(body, pos)
        if not m:
            raise OptionError(f"malformed pass spec {spec!r} at {body[pos:].strip()!r}")
        key, raw = m.group(1), m.group(2)
        out[key] = json.loads(raw) if raw.startswith('"') else raw
        pos = m.end()
    return name.strip(), out


def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _args(tp: Any) -> tuple[Any, ...]:
    return typing.get_args(tp)


def _is_union(tp: Any) -> bool:
    return typing.get_origin(tp) in (Union, types.UnionType)


def _accepts(tp: Any, value: Any) -> bool:
    if tp is Any:
        return True
    if _is_union(tp):
        return any(_accepts(t, value) for t in _args(tp))
    if typing.get_origin(tp) is Literal:
        return any(value == a and type(value) is type(a) for a in _args(tp))
    if tp is type(None):
        return value is None
    if tp is float:
        return isinstance(value, float) or (isinstance(value, int) and not isinstance(value, bool))
    if tp is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, tp)


def _type_text(tp: Any) -> str:
    if _is_union(tp):
        return " | ".join(_type_text(t) for t in _args(tp))
    if typing.get_origin(tp) is Literal:
        return " | ".join(json.dumps(a) if isinstance(a, str) else format_value(a) for a in _args(tp))
    if tp is type(None):
        return "none"
    return getattr(tp, "__name__", str(tp))


def _coerce(tp: Any, value: Any, where: str) -> Any:
    """``value`` as type ``tp``: text is parsed, typed values are checked (int -> float allowed)."""
    if not isinstance(value, str) or tp is str:
        if tp is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if _is_union(tp) and float in _args(tp) and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if _accepts(tp, value):
            return value
        raise OptionError(f"option {where} expects {_type_text(tp)}, got {value!r}")
    candidates = _args(tp) if _is_union(tp) else (tp,)
    for t in candidates:  # none first, so "none" never becomes the string "none"
        if t is type(None) and value.strip().lower() == "none":
            return None
    for t in candidates:
        parsed = _parse_text(t, value)
        if parsed is not _NO:
            return parsed
    raise OptionError(f"option {where} expects {_type_text(tp)}, got {value!r}")


_NO = object()


def _parse_text(tp: Any, text: str) -> Any:
    low = text.strip().lower()
    if tp is bool:
        return True if low in _TRUE else False if low in _FALSE else _NO
    if tp is int:
        try:
            return int(text.strip())
        except ValueError:
            return _NO
    if tp is float:
        try:
            return float(text.strip())
        except ValueError:
            return _NO
    if tp is str:
        return text
    if typing.get_origin(tp) is Literal:
        for a in _args(tp):
            if format_value(a) == text.strip() or (isinstance(a, str) and a == text):
                return a
        return _NO
    return _NO


@dataclass(frozen=True)
class RowRangeSliced(Pass):
    """A splittable pass whose parts are slices of row ranges of its input (``split_refs``, built by
    ``deps_split.range_slices``): ``split`` takes each (the serial path and the tests), ``take`` cuts it."""

    def split(self, module: Module) -> list[Module] | None:
        return materialized(self, module, self.split_refs(module))

    def take(self, base: Module, spec: Mapping[str, Any]) -> Module:
        from tusk.stages.deps_split import take_range

        return take_range(base, spec)
