"""What every pass is: a name, a version, frozen options, and ``run``.

A pass is a class with

* ``name`` — the backend's registered pass name (users search for it);
* ``version`` — changes whenever the pass's output for a given input can
  change, so cached results of older versions are not reused;
* ``Options`` — a frozen dataclass of typed options (``str(spec)`` gives the
  deterministic ``name{opt=value ...}`` form used in cache keys and logs);
* ``run(module, options) -> (module, stats)`` — never mutates ``module``;
  ``stats`` is a small JSON-able dict (counts, not objects).

A pass whose work falls apart into independent pieces also implements
``split(module, options)`` (a list of part modules, or None when there is
nothing to gain) and ``merge(module, parts, part_stats, options)``.  The
build graph runs ``run`` on every part in parallel and then ``merge``; the
result must equal the serial ``run``.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass, fields
from typing import Any, ClassVar

from tusk.ir.errors import TuskError
from tusk.ir.module import Module

Stats = dict[str, Any]


@dataclass(frozen=True)
class NoOptions:
    pass


class Pass:
    name: ClassVar[str] = ""
    version: ClassVar[str] = "1"
    Options: ClassVar[type] = NoOptions

    def __init__(self) -> None:
        self.log = logging.getLogger(f"tusk.{self.name}")

    def run(self, module: Module, options: Any) -> tuple[Module, Stats]:
        raise NotImplementedError

    def split(self, module: Module, options: Any) -> list[Module] | None:
        """Independent parts of the work, or None to run whole."""
        return None

    def merge(self, module: Module, parts: list[Module], part_stats: list[Stats], options: Any
              ) -> tuple[Module, Stats]:
        raise NotImplementedError(f"{self.name} does not split")

    def run_split(self, module: Module, options: Any) -> tuple[Module, Stats]:
        """The split/run/merge path run serially (tests compare it with ``run``)."""
        parts = self.split(module, options)
        if parts is None:
            return self.run(module, options)
        results = [self.run(p, options) for p in parts]
        return self.merge(module, [m for m, _ in results], [s for _, s in results], options)


def options_spec(name: str, options: Any) -> str:
    """``name{a=1 b=x}``: deterministic, and parsed back by :func:`parse_options`."""
    if not dataclasses.is_dataclass(options) or not fields(options):
        return name
    body = " ".join(f"{f.name}={_fmt(getattr(options, f.name))}" for f in fields(options))
    return f"{name}{{{body}}}"


def _fmt(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


def coerce_option(cls: type, key: str, text: Any, pass_name: str) -> Any:
    """Convert ``text`` (from the command line or TOML) to the type of option ``key``."""
    by_name = {f.name: f for f in fields(cls)}
    if key not in by_name:
        known = ", ".join(sorted(by_name)) or "none"
        raise TuskError(f"pass {pass_name} has no option {key!r} (options: {known})")
    default = by_name[key].default
    kind = type(default) if default is not dataclasses.MISSING and default is not None else str
    if not isinstance(text, str):
        if kind is float and isinstance(text, int):
            return float(text)
        if isinstance(text, kind) or (default is None):
            return text
        raise TuskError(f"option {pass_name}.{key} expects {kind.__name__}, got {text!r}")
    try:
        if kind is bool:
            low = text.lower()
            if low in ("1", "true", "yes", "on"):
                return True
            if low in ("0", "false", "no", "off"):
                return False
            raise ValueError(text)
        if default is None:
            try:
                return int(text)
            except ValueError:
                return text
        return kind(text)
    except ValueError:
        raise TuskError(f"option {pass_name}.{key} expects {kind.__name__}, got {text!r}") from None


def make_options(cls: type, values: dict[str, Any], pass_name: str) -> Any:
    return cls(**{k: coerce_option(cls, k, v, pass_name) for k, v in values.items()})


def parse_options(spec: str) -> tuple[str, dict[str, str]]:
    """Inverse of :func:`options_spec`: ``name{a=1 b=x}`` -> (name, {"a": "1", "b": "x"})."""
    spec = spec.strip()
    if "{" not in spec:
        return spec, {}
    if not spec.endswith("}"):
        raise TuskError(f"malformed pass spec {spec!r}")
    name, body = spec[:-1].split("{", 1)
    out = {}
    for item in body.split():
        if "=" not in item:
            raise TuskError(f"malformed option {item!r} in pass spec {spec!r}")
        k, v = item.split("=", 1)
        out[k] = v
    return name, out
