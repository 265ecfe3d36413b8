"""Every setting of the build, read in one place.

Each setting names its environment variable, its default and whether it
can change what a build *produces*.  Only the settings marked
``affects_output`` enter cache keys (:func:`output_key`); the others (where
the cache lives, how many workers) change how fast a build is, never its
result, so a cache stays valid when they change.  A setting that is the
default of a pass option (``option="pass.name"``, e.g. the backend's
``MAXHU``) enters keys as that option: :func:`pass_defaults` puts its value
into the pipeline, so only the steps of that pass are rebuilt when it
changes.  Command-line options override the environment, which overrides
the defaults.  A value that does not parse is a TuskError naming the
variable.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Mapping

from tusk.ir.errors import UsageError


@dataclass(frozen=True)
class Setting:
    name: str
    env: str
    default: Callable[[], Any]
    affects_output: bool
    parse: Callable[[str], Any] = str
    help: str = ""
    option: str | None = None  # "pass.option" this setting is the default of (keyed through it)


def _user_cache_dir() -> Path:
    """The platform's per-user cache directory, plus ``tusk``."""
    if sys.platform == "win32":
        base = os.environ.get("LOCALAPPDATA") or str(Path.home() / "AppData" / "Local")
        return Path(base) / "tusk" / "Cache"
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Caches" / "tusk"
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "tusk"


def _int_or_none(text: str) -> int | None:
    return None if text.strip().lower() in ("", "none") else int(text)


def _positive_or_none(text: str) -> int | None:
    value = _int_or_none(text)
    if value is not None and value <= 0:
        raise ValueError(text)
    return value


def _count_or_none(text: str) -> int | None:
    value = _int_or_none(text)
    if value is not None and value < 0:
        raise ValueError(text)
    return value


def _count(text: str) -> int:
    value = int(text.strip())
    if value < 0:
        raise ValueError(text)
    return value


def _verify_level(text: str) -> str:
    low = text.strip().lower()
    low = {"1": "all", "true": "all", "yes": "all", "on": "all", "0": "none", "false": "none", "no": "none",
           "off": "none"}.get(low, low)
    if low not in ("none", "ends", "all"):
        raise ValueError(text)
    return low


def _bool(text: str) -> bool:
    low = text.strip().lower()
    if low not in ("1", "true", "yes", "on", "0", "false", "no", "off"):
        raise ValueError(text)
    return low in ("1", "true", "yes", "on")


SETTINGS: tuple[Setting, ...] = (
    Setting("cache_dir", "TUSK_CACHE_DIR", lambda: str(_user_cache_dir()), False,
            help="store root: a directory or an fsspec URL"),
    Setting("workers", "TUSK_WORKERS", lambda: None, False, _count_or_none,
            help="local worker processes (0: run in this process, no cluster; default: chosen by the size of "
                 "the build)"),
    Setting("scheduler", "TUSK_SCHEDULER", lambda: None, False,
            help="address of an existing Dask scheduler"),
    Setting("verify", "TUSK_VERIFY", lambda: "ends", False, lambda t: _verify_level(t),
            help="when ir.verify checks the IR: ends (the kernel as translated and the final output), all "
                 "(after every pass) or none; it only finds errors, it never changes the output"),
    Setting("arch", "TUSK_ARCH", lambda: "gen3", True,
            help="target architecture of host modules"),
    Setting("instruction_limit", "TUSK_INSTRUCTION_LIMIT", lambda: None, True, _int_or_none,
            help="post-unroll instruction budget (module attribute max_instruction_limit)"),
    Setting("timeline_limit", "TUSK_TIMELINE_LIMIT", lambda: 400_000, False, _count,
            help="kernels with more instructions get no engine timeline in the build report (the timing model "
                 "takes ~10 s per million instructions)"),
    Setting("memory", "TUSK_MEMORY", lambda: None, False, _positive_or_none,
            help="bytes of RAM a build may use (default: the machine's): each local worker's Dask memory_limit "
                 "is this / workers, and a process keeps modules for its next step in 1/16 of its own budget"),
    Setting("trace_timeout", "TUSK_TRACE_TIMEOUT", lambda: 300, False, _positive_or_none,
            help="seconds the trace of a kernel written in Python may run before the build fails that kernel "
                 "(none: no limit)"),
    Setting("maxhu", "MAXHU", lambda: None, False, _int_or_none, option="heuristic_unroll.maxhu",
            help="cap on the loops heuristic_unroll marks (the backend's variable)"),
)
BY_NAME = {s.name: s for s in SETTINGS}
VERIFY_LEVELS = ("none", "ends", "all")
_EXPECTED: dict[Callable[[str], Any], str] = {_count: "an integer, 0 or more", _int_or_none: "an integer or none",
                                              _count_or_none: "an integer, 0 or more, or none",
                                              _positive_or_none: "a positive integer or none", _bool: "true or false"}
_EXPECTED_BY_NAME = {"verify": "none, ends or all"}


def expected(name: str) -> str:
    """What setting ``name`` takes, in words (the environment and tusk.toml refuse other values alike)."""
    return _EXPECTED_BY_NAME.get(name) or _EXPECTED.get(BY_NAME[name].parse, "a valid value")


def valid(name: str, value: Any) -> bool:
    """Does setting ``name`` take ``value`` (as written in tusk.toml: an int, a string or "none")?"""
    try:
        BY_NAME[name].parse(str(value))
    except ValueError:
        return False
    return True


@dataclass(frozen=True)
class Config:
    """Resolved settings; build with :func:`load`."""

    values: Mapping[str, Any] = field(default_factory=dict)

    def __getattr__(self, name: str) -> Any:
        try:
            return self.values[name]
        except KeyError:
            raise AttributeError(name) from None

    def with_(self, **changes: Any) -> "Config":
        return replace(self, values={**self.values, **changes})


def load(overrides: Mapping[str, Any] | None = None, environ: Mapping[str, str] | None = None) -> Config:
    """Defaults, then the environment, then ``overrides`` (None values in overrides are ignored; the text
    ``"none"`` of a file is parsed, and sets no limit)."""
    env = os.environ if environ is None else environ
    values: dict[str, Any] = {}
    for s in SETTINGS:
        raw = env.get(s.env)
        try:
            values[s.name] = s.parse(raw) if raw not in (None, "") else s.default()
        except ValueError:
            raise UsageError(f"environment variable {s.env}={raw!r} is not valid: expected {expected(s.name)} "
                             f"({s.help})") from None
    for k, v in (overrides or {}).items():
        if k not in BY_NAME:
            raise KeyError(f"unknown setting {k!r}")
        if isinstance(v, str) and v.strip().lower() == "none":
            values[k] = BY_NAME[k].parse(v)
        elif v is not None:
            values[k] = v
    return Config(values)


def output_key(config: Config) -> dict[str, Any]:
    """The settings that can change a build's result: the ``env`` part of every action key."""
    return {s.name: config.values[s.name] for s in SETTINGS if s.affects_output}


def pass_defaults(config: Config) -> list[tuple[str, str, Any]]:
    """(pass, option, value) for every set setting that is a pass option's default (MAXHU)."""
    out = []
    for s in SETTINGS:
        if s.option and config.values.get(s.name) is not None:
            pass_name, option = s.option.split(".")
            out.append((pass_name, option, config.values[s.name]))
    return out
