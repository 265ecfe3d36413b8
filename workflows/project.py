"""Build settings kept next to the kernels: ``tusk.toml`` or ``[tool.tusk]`` in a ``pyproject.toml``.

A kernel directory may hold a ``tusk.toml`` (or a ``pyproject.toml`` with a
``[tool.tusk]`` table; ``tusk.toml`` wins when both exist)::

    arch = "gen3"                 # any setting of tusk.workflows.config (tusk passes lists them)
    instruction_limit = 5000000
    maxhu = 8
    workers = 4
    cache_dir = "../.tusk-cache"  # relative paths: from the file's directory
    pipeline = "pipeline.toml"    # a pipeline file (see tusk.workflows.pipeline)

    [passes.unroll]               # pass options, as --set unroll.loops=marked would set them
    loops = "marked"

Precedence, highest first: the command line, this file, the environment
(``TUSK_ARCH`` ...), the defaults.  Everything is checked when the file is
read: an unknown key, a value of the wrong type, a pass that does not exist.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tusk.ir.errors import UsageError
from tusk.workflows import config

FILE = "tusk.toml"
PYPROJECT = "pyproject.toml"
PATH_SETTINGS = frozenset({"cache_dir"})  # relative to the file's directory (unless a URL)
_TYPES: dict[str, tuple[type, ...]] = {"workers": (int,), "instruction_limit": (int,), "maxhu": (int,),
                                       "verify": (bool,)}


class ProjectFileError(UsageError):
    """tusk.toml (or [tool.tusk]) cannot be used: a usage error, reported before anything is built."""


@dataclass
class ProjectFile:
    """What a kernel directory's settings file asks for (empty when there is none)."""

    path: Path | None = None
    settings: dict[str, Any] = field(default_factory=dict)   # config setting name -> typed value
    sets: list[str] = field(default_factory=list)            # "pass.option=value", as --set takes them
    pipeline: Path | None = None

    def describe(self) -> str:
        return str(self.path) if self.path else "none"


def find(directory: Path) -> Path | None:
    """``tusk.toml`` in ``directory``, else its ``pyproject.toml`` if that has ``[tool.tusk]``, else None."""
    own = Path(directory) / FILE
    if own.is_file():
        return own
    py = Path(directory) / PYPROJECT
    if py.is_file():
        try:
            data = tomllib.loads(py.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
            return None  # not ours to judge: a pyproject.toml without a readable [tool.tusk] is ignored
        if isinstance(data.get("tool"), dict) and "tusk" in data["tool"]:
            return py
    return None


def load(directory: Path) -> ProjectFile:
    """The settings file of ``directory`` (see the module docstring); ProjectFileError if it is bad."""
    path = find(directory)
    if path is None:
        return ProjectFile()
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as e:
        raise ProjectFileError(f"{path}: cannot be read ({getattr(e, 'strerror', None) or e})") from None
    except tomllib.TOMLDecodeError as e:
        raise ProjectFileError(f"{path}: malformed TOML: {e}") from None
    where = str(path)
    if path.name == PYPROJECT:
        data = data["tool"]["tusk"]
        where = f"{path} [tool.tusk]"
        if not isinstance(data, dict):
            raise ProjectFileError(f"{where}: expected a table")
    return parse(data, path.parent, where, path)


def parse(data: dict[str, Any], base: Path, where: str, path: Path | None = None) -> ProjectFile:
    pf = ProjectFile(path=path)
    for key, value in data.items():
        if key == "passes":
            pf.sets = _pass_options(value, where)
        elif key == "pipeline":
            if not isinstance(value, str) or not value:
                raise ProjectFileError(f"{where}: pipeline must be a file name")
            pf.pipeline = base / value
        elif key in config.BY_NAME:
            pf.settings[key] = _setting(key, value, base, where)
        else:
            known = sorted([*config.BY_NAME, "passes", "pipeline"])
            raise ProjectFileError(f"{where}: unknown key {key!r} (known: {', '.join(known)})")
    return pf


def _setting(name: str, value: Any, base: Path, where: str) -> Any:
    types = _TYPES.get(name, (str,))
    if isinstance(value, str) and value.strip().lower() == "none" and name in ("instruction_limit", "maxhu"):
        return None
    if isinstance(value, bool) and bool not in types or not isinstance(value, types):
        expected = {int: "an integer", bool: "true or false", str: "a string"}[types[0]]
        raise ProjectFileError(f"{where}: {name} must be {expected}, got {value!r}")
    if name == "workers" and value < 0:
        raise ProjectFileError(f"{where}: workers must be 0 or more, got {value}")
    if name in PATH_SETTINGS and "://" not in value:
        value = str((base / value).resolve()) if not Path(value).is_absolute() else value
    return value


def _pass_options(value: Any, where: str) -> list[str]:
    if not isinstance(value, dict):
        raise ProjectFileError(f"{where}: passes must be a table of tables ([passes.unroll] loops = ...)")
    sets = []
    for pass_name, options in value.items():
        if not isinstance(options, dict):
            raise ProjectFileError(f"{where}: [passes.{pass_name}] must be a table of options")
        for option, v in options.items():
            if isinstance(v, bool):
                text = "true" if v else "false"
            elif isinstance(v, (int, float, str)):
                text = str(v)
            else:
                raise ProjectFileError(f"{where}: passes.{pass_name}.{option} must be a number, a string "
                                       f"or true/false, got {v!r}")
            sets.append(f"{pass_name}.{option}={text}")
    return sets
