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

    [kernels.tensor_add]          # an NKI kernel in Python, traced into KLR by the build (tusk.frontend)
    file = "tensor_add.py"        # inside the directory
    function = "nki_tensor_add"   # optional when the file has exactly one @nki.jit function
    inputs = ["f32[256,512]", "f32[256,512]"]   # the tensor arguments, in order
    args = {eps = 1e-6, shape2D = [32, 16], dtype = "bf16"}   # optional: the other arguments, by name
    grid = [2]                    # optional SPMD launch grid
    paths = ["../common"]         # optional: directories it imports from besides its own (tusk trace --path)
    nki_api = 1                   # optional: `import nki` is NKI 1.x (tusk trace --nki-api 1)

Precedence, highest first: the command line, this file, the environment
(``TUSK_ARCH`` ...), the defaults.  Everything is checked when the file is
read: an unknown key, a value of the wrong type, a pass that does not exist,
a ``[kernels.X]`` entry whose file is missing or outside the directory, whose
input specs do not parse, or whose name is taken by a kernel file of the
directory.  Only the ``.py`` files named here are ever executed (tracing runs
the kernel's Python, as NKI itself does); other ``.py`` files are skipped.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tusk.ir.errors import InputError, TuskError, UsageError
from tusk.workflows import config

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "kernels"  # the shipped corpus (tusk.examples)
FILE = "tusk.toml"
PYPROJECT = "pyproject.toml"
PATH_SETTINGS = frozenset({"cache_dir"})  # relative to the file's directory (unless a URL)
_TYPES: dict[str, tuple[type, ...]] = {"workers": (int,), "instruction_limit": (int,), "maxhu": (int,),
                                       "timeline_limit": (int,), "memory": (int,), "trace_timeout": (int,)}
_REQUEST_FIELDS = frozenset({"workers", "scheduler", "cache_dir", "verify"})  # CompileRequest's own fields
_NONE_ALLOWED = frozenset({"instruction_limit", "maxhu", "memory", "trace_timeout"})  # "none": no limit


class ProjectFileError(UsageError):
    """tusk.toml (or [tool.tusk]) cannot be used: a usage error, reported before anything is built."""


@dataclass(frozen=True)
class PythonKernel:
    """A ``[kernels.NAME]`` entry: an NKI kernel written in Python, traced into KLR by the build."""

    name: str                       # the unit's name (its output directory), like a kernel file's stem
    file: Path                      # absolute, symbolic links resolved; inside the kernel directory
    entry: str                      # the file as tusk.toml writes it (for messages)
    function: str | None = None     # None: the file's only @nki.jit function
    inputs: tuple = ()              # tusk.frontend.TensorSpec, one per tensor argument
    grid: tuple[int, ...] = ()      # SPMD launch grid; () for none
    args: tuple = ()                # (name, value) of the other arguments (``args = {eps = 1e-6}``), by name
    paths: tuple[Path, ...] = ()    # directories it may import from besides its own (``paths = [...]``)
    nki_api: int | None = None      # 1: ``import nki`` is NKI 1.x (``nki_api = 1``); None: the import name says


@dataclass
class ProjectFile:
    """What a kernel directory's settings file asks for (empty when there is none)."""

    path: Path | None = None
    settings: dict[str, Any] = field(default_factory=dict)   # config setting name -> typed value
    sets: list[str] = field(default_factory=list)            # "pass.option=value", as --set takes them
    pipeline: Path | None = None
    kernels: list[PythonKernel] = field(default_factory=list)  # [kernels.NAME] tables, in file order

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
        elif key == "kernels":
            pf.kernels = _kernels(value, base, where)
        elif key in config.BY_NAME:
            pf.settings[key] = _setting(key, value, base, where)
        else:
            known = sorted([*config.BY_NAME, "kernels", "passes", "pipeline"])
            raise ProjectFileError(f"{where}: unknown key {key!r} (known: {', '.join(known)})")
    return pf


def _setting(name: str, value: Any, base: Path, where: str) -> Any:
    if name == "verify":  # true / false, or a level
        level = {True: "all", False: "none"}.get(value, value) if isinstance(value, bool) else value
        if level not in config.VERIFY_LEVELS:
            raise ProjectFileError(f"{where}: verify must be {', '.join(config.VERIFY_LEVELS)}, true or false, "
                                   f"got {value!r}")
        return level
    types = _TYPES.get(name, (str,))
    if isinstance(value, str) and value.strip().lower() == "none" and name in _NONE_ALLOWED:
        return "none"  # parsed by config.load: None there would mean "not set here"
    if isinstance(value, bool) and bool not in types or not isinstance(value, types):
        expected = {int: "an integer", bool: "true or false", str: "a string"}[types[0]]
        raise ProjectFileError(f"{where}: {name} must be {expected}, got {value!r}")
    if isinstance(value, int) and not config.valid(name, value):
        raise ProjectFileError(f"{where}: {name} must be {config.expected(name)}, got {value}")
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


KERNEL_KEYS = ("file", "function", "inputs", "args", "grid", "paths", "nki_api")


def _kernels(value: Any, base: Path, where: str) -> list[PythonKernel]:
    """The ``[kernels.NAME]`` tables, each checked (see the module docstring); ProjectFileError naming the key."""
    from tusk.workflows.kernels import name_problem

    if not isinstance(value, dict):
        raise ProjectFileError(f"{where}: kernels must be a table of tables ([kernels.NAME] file = \"k.py\", "
                               f"inputs = [...])")
    taken = _kernel_file_names(base)
    out = []
    for name, table in value.items():
        key = f"kernels.{name}"
        if not isinstance(table, dict):
            raise ProjectFileError(f"{where}: {key} must be a table (file = \"k.py\", inputs = [...])")
        problem = name_problem(name)
        if problem:
            raise ProjectFileError(f"{where}: {key}: {problem.replace('(from the file name)', '(the table name)')}")
        if name in taken:
            raise ProjectFileError(f"{where}: {key}: the name is taken by the kernel file {taken[name]} of the "
                                   f"directory (its output directory would be {name} too); rename one of them")
        unknown = [k for k in table if k not in KERNEL_KEYS]
        if unknown:
            raise ProjectFileError(f"{where}: {key}: unknown key {unknown[0]!r} (known: {', '.join(KERNEL_KEYS)})")
        file = _kernel_file(table, base, where, key)
        function = _kernel_function(table, where, key)
        _check_defined(file, function, where, key)
        out.append(PythonKernel(name=name, file=file, entry=table["file"],
                                function=function, inputs=_kernel_inputs(table, where, key),
                                grid=_kernel_grid(table, where, key), args=_kernel_args(table, where, key),
                                paths=_kernel_paths(table, base, where, key), nki_api=_kernel_api(table, where, key)))
    return out


def _kernel_file_names(base: Path) -> dict[str, str]:
    """Name -> file of every kernel file of ``base`` (.klr, .json, KLR content): both its stem and its whole
    name, since kernel files that share a stem are named by their whole names."""
    from tusk.ir.klr.magic import is_klr_bytes

    names: dict[str, str] = {}
    try:
        entries = sorted(Path(base).iterdir())
    except OSError:
        return names
    for p in entries:
        kernel = p.suffix in (".klr", ".json")
        if not kernel and p.suffix != ".py":
            try:
                if p.is_file():
                    with open(p, "rb") as fh:
                        kernel = is_klr_bytes(fh.read(4))
            except OSError:
                continue
        if kernel:
            names.setdefault(p.stem, p.name)
            names.setdefault(p.name, p.name)
    return names


def _kernel_file(table: dict, base: Path, where: str, key: str) -> Path:
    import os

    if "file" not in table:
        raise ProjectFileError(f"{where}: {key}.file is missing (the kernel's .py file, relative to {base})")
    value = table["file"]
    if not isinstance(value, str) or not value.strip():
        raise ProjectFileError(f"{where}: {key}.file must be a file name (a string), got {value!r}")
    if "\0" in value:
        raise ProjectFileError(f"{where}: {key}.file {value!r} contains a NUL character")
    if not value.endswith(".py"):
        raise ProjectFileError(f"{where}: {key}.file must name a Python file (.py), got {value!r}")
    root = Path(os.path.realpath(base))
    path = Path(os.path.realpath(base / value))
    if path == root or not path.is_relative_to(root):
        raise ProjectFileError(f"{where}: {key}.file {value!r} is outside the kernel directory {root}; "
                               f"only files inside it are traced")
    if not path.exists():
        raise ProjectFileError(f"{where}: {key}.file {value!r}: no such file (looked for {path})")
    if not path.is_file():
        raise ProjectFileError(f"{where}: {key}.file {value!r} is not a regular file")
    return path


def _kernel_function(table: dict, where: str, key: str) -> str | None:
    value = table.get("function")
    if value is None:
        return None
    if not isinstance(value, str) or not all(part.isidentifier() for part in value.split(".")):
        raise ProjectFileError(f"{where}: {key}.function must be the name of a Python function (or Class.name), "
                               f"got {value!r}")
    return value


def _check_defined(file: Path, function: str | None, where: str, key: str) -> None:
    """A ``function`` the file's top level never binds is refused before the build (read, never run: a
    ``from x import *`` or a file that does not parse is left to the trace)."""
    import ast

    if function is None:
        return
    try:
        tree = ast.parse(file.read_bytes())
    except (SyntaxError, ValueError, OSError):
        return
    bound: list[str] = []
    stack = list(tree.body)
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.append(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            if any(a.name == "*" for a in node.names):
                return
            bound += [(a.asname or a.name).split(".")[0] for a in node.names]
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            bound += [n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)]
        elif isinstance(node, (ast.If, ast.Try, ast.With, ast.For, ast.While)):
            stack += [*node.body, *getattr(node, "orelse", []), *getattr(node, "finalbody", []),
                      *(h for handler in getattr(node, "handlers", []) for h in handler.body)]
    head = function.split(".")[0]
    if head not in bound:
        import difflib

        defs = sorted({n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))})
        close = difflib.get_close_matches(head, defs, n=1)
        raise ProjectFileError(f"{where}: {key}.function {function!r}: {file.name} defines no {head!r}"
                               + (f" (did you mean {close[0]!r}?" if close else " (")
                               + f" functions: {', '.join(defs) or 'none'})")


def _kernel_inputs(table: dict, where: str, key: str) -> tuple:
    from tusk.frontend.specs import parse_tensor_spec

    if "inputs" not in table:
        raise ProjectFileError(f"{where}: {key}.inputs is missing (one spec per kernel argument, e.g. "
                               f"[\"f32[128,512]\", \"bf16[128,512]\"])")
    value = table["inputs"]
    if not isinstance(value, list):
        raise ProjectFileError(f"{where}: {key}.inputs must be a list of specs such as \"f32[128,512]\", "
                               f"got {value!r}")
    specs = []
    for i, text in enumerate(value):
        if not isinstance(text, str):
            raise ProjectFileError(f"{where}: {key}.inputs[{i}] must be a string such as \"f32[128,512]\", "
                                   f"got {text!r}")
        try:
            specs.append(parse_tensor_spec(text))
        except TuskError as e:
            raise ProjectFileError(f"{where}: {key}.inputs[{i}]: {e}") from None
    return tuple(specs)


def _kernel_args(table: dict, where: str, key: str) -> tuple:
    """``args = {shape2D = [32, 16], eps = 1e-6, dtype = "bf16"}``: arrays are tuples; a string is read as
    ``tusk trace --arg`` reads its text (a dtype name is the dtype; quote it again for a string: "'fast'")."""
    from tusk.frontend.args import from_toml

    value = table.get("args", {})
    if not isinstance(value, dict):
        raise ProjectFileError(f"{where}: {key}.args must be a table of the kernel's other arguments by name, "
                               f"e.g. args = {{eps = 1e-6, shape2D = [32, 16]}}; got {value!r}")
    out = []
    for name, v in value.items():
        if not name.isidentifier():
            raise ProjectFileError(f"{where}: {key}.args.{name}: not a parameter name")
        try:
            out.append((name, from_toml(v)))
        except ValueError as e:
            raise ProjectFileError(f"{where}: {key}.args.{name}: {e}") from None
    return tuple(out)


def _kernel_paths(table: dict, base: Path, where: str, key: str) -> tuple[Path, ...]:
    """``paths = ["../common"]``: directories (relative to the file's) the kernel imports from; each must exist."""
    import os

    value = table.get("paths", [])
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ProjectFileError(f"{where}: {key}.paths must be a list of directories such as [\"../common\"], "
                               f"got {value!r}")
    out = []
    for v in value:
        if "\0" in v:
            raise ProjectFileError(f"{where}: {key}.paths: {v!r} contains a NUL character")
        d = Path(os.path.realpath(base / v))
        if not d.is_dir():
            raise ProjectFileError(f"{where}: {key}.paths: {v!r} is not a directory (looked for {d})")
        out.append(d)
    return tuple(out)


def _kernel_api(table: dict, where: str, key: str) -> int | None:
    value = table.get("nki_api")
    if value is not None and (isinstance(value, bool) or value not in (1, 2)):
        raise ProjectFileError(f"{where}: {key}.nki_api must be 1 or 2 (what `import nki` means), got {value!r}")
    return value


MAX_GRID = 1 << 16  # launch grids are a handful of programs per dimension; this only stops nonsense early


def _kernel_grid(table: dict, where: str, key: str) -> tuple[int, ...]:
    value = table.get("grid", [])
    if not isinstance(value, list) or any(isinstance(d, bool) or not isinstance(d, int) for d in value):
        raise ProjectFileError(f"{where}: {key}.grid must be a list of integers such as [2] or [2, 2], "
                               f"got {value!r}")
    if any(d < 1 or d > MAX_GRID for d in value):
        raise ProjectFileError(f"{where}: {key}.grid: every dimension must be 1 to {MAX_GRID}, got {value!r}")
    return tuple(value)


# ====================================================================== a request, checked before it runs


class NoKernels(InputError):
    """The directory holds no file that may be a kernel (exit 1: nothing to compile, nothing created)."""


def has_kernel_files(directory: Path) -> bool:
    """Does ``directory`` hold a file that may be a kernel (.klr, .json, or KLR content)?"""
    from tusk.ir.klr.magic import is_klr_bytes

    for p in Path(directory).iterdir():
        if p.suffix in (".klr", ".json"):
            return True
        try:
            if p.is_file():
                with open(p, "rb") as fh:
                    if is_klr_bytes(fh.read(4)):
                        return True
        except OSError:
            continue
    return False


SETTING_ARGS = ("workers", "scheduler", "cache_dir", "verify", "arch", "instruction_limit", "maxhu")


def prepare_request(directory: Path, out: Path, *, sets: list[str] = (), pipeline: Path | None = None,
                    stages: bool = False, stage: list[str] = (), dashboard: bool = False, no_cache: bool = False,
                    core_id: int | None = None, flatten: bool = False, **settings: Any):
    """Everything a build can be refused for, checked before it starts; ``(CompileRequest, config, file)``.

    ``settings`` are the command-line values of :data:`SETTING_ARGS` (None:
    not given).  Raises a UsageError with the reason, or
    :class:`NoKernels`.  Nothing is created.
    """
    from tusk.workflows import config as config_mod
    from tusk.workflows.compile import CompileRequest
    from tusk.workflows.pipeline import apply_defaults, apply_sets, default_pipeline, load_pipeline, resolve

    unknown = set(settings) - set(SETTING_ARGS)
    if unknown:
        raise TypeError(f"unknown settings {sorted(unknown)} (settings: {', '.join(SETTING_ARGS)})")
    directory = Path(directory)
    if not directory.exists():
        raise UsageError(f"{directory}: no such directory")
    if not directory.is_dir():
        raise UsageError(f"{directory} is not a directory (tusk compile takes a directory of kernels; "
                         f"'tusk show FILE' lists one file)")
    if settings.get("workers") is not None and settings["workers"] < 0:
        raise UsageError(f"--workers must be 0 (run in this process) or more, got {settings['workers']}")
    if core_id is not None and core_id < 0:
        raise UsageError(f"--core-id must be a logical core number (0 or more), got {core_id}")
    pf = load(directory)
    overrides = {**pf.settings, **{k: v for k, v in settings.items() if v is not None}}
    cfg = config_mod.load(overrides)
    if cfg.values.get("arch") is not None:
        from tusk.ir.arch import get_arch

        try:
            get_arch(cfg.values["arch"])
        except UsageError as e:  # from --arch, TUSK_ARCH or tusk.toml: before the build, not in every kernel
            raise UsageError(f"--arch / TUSK_ARCH / tusk.toml arch: {e}") from None
    pipe = pipeline or pf.pipeline
    entries = load_pipeline(pipe) if pipe else default_pipeline()
    apply_defaults(entries, config_mod.pass_defaults(cfg))
    all_sets = [*pf.sets, *sets]
    apply_sets(entries, all_sets)
    resolved = resolve(entries)
    known = {s.label for s in resolved.steps} | {s.name for s in resolved.steps}
    bad = [s for s in stage if s not in known]
    if bad:
        raise UsageError(f"--stage {bad[0]}: the pipeline runs no such step (steps: "
                         f"{', '.join(s.label for s in resolved.steps)})")
    if not has_kernel_files(directory) and not pf.kernels:
        py = sorted(p.name for p in directory.glob("*.py"))[:3]
        hint = (f"; its Python files ({', '.join(py)}) are compiled when tusk.toml names them, e.g. "
                f"[kernels.{Path(py[0]).stem}] file = \"{py[0]}\" inputs = [\"f32[128,512]\"]") if py else ""
        raise NoKernels(f"{directory} has no kernel files (.klr or BIR-JSON .json, or [kernels.NAME] tables in "
                        f"tusk.toml); nothing to compile{hint}")
    req = CompileRequest(directory=directory, out=Path(out), workers=overrides.get("workers"),
                         scheduler=overrides.get("scheduler"), dashboard=dashboard,
                         cache_dir=overrides.get("cache_dir"), no_cache=no_cache, core_id=core_id, sets=all_sets,
                         pipeline=pipe, stages=True if stages else (list(stage) if stage else False),
                         verify=overrides.get("verify"), flatten=flatten,
                         # every other setting (arch, limits, memory, ...): the fields above are the rest
                         settings={k: v for k, v in overrides.items() if k not in _REQUEST_FIELDS},
                         traced=list(pf.kernels))
    return req, cfg, pf
