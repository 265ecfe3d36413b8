"""What a kernel file can import while it is traced, and nothing after.

* ``nki``, ``neuronxcc.nki`` and their ``language`` / ``isa`` / ``typing``
  modules resolve to Tusk's front end (:data:`ALIASES`).
* The kernel's own directory is importable (``import helpers``, ``from apis
  import *``), as when Python runs the file as a script; a file inside a
  package (a directory with ``__init__.py``) is imported as part of its
  package, so ``from .utils import x`` works: the directory above the
  package root is importable instead.
* Directories the user names (``tusk trace --path DIR``, ``paths = [...]`` in
  ``tusk.toml``) are importable after the kernel's own, and their files are
  the kernel tree's too: KLR's examples do ``from apis import *`` with
  ``apis.py`` one directory up.  Nothing else outside the kernel's
  directory (or package) is read, apart from installed packages.
* A module the kernel's code imports that is not installed (``torch``,
  ``jax``, ``scipy``, a test helper of ``neuronxcc``) is bound to a
  stand-in (:class:`Absent`): the import succeeds, and using it while the
  kernel is traced is a TraceError naming the module and the line.  Only
  imports made by the kernel's files get stand-ins; a library's own
  optional imports still fail as usual.  Installed packages import normally.

Everything is undone when the trace ends: ``sys.path``, ``sys.modules``
(the kernel's modules are forgotten, so an edited helper is read again),
the import hook, and attributes the import system set on Tusk's modules.
:attr:`KernelImports.sources` lists the kernel-tree files the trace ran.
"""

from __future__ import annotations

import contextlib
import importlib.abc
import importlib.machinery
import logging
import os
import sys
import types
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tusk.frontend import nki as _nki
from tusk.frontend.errors import TraceError, current_user_line, in_tusk, not_in_front_end
from tusk.frontend.nki import compiler as _compiler
from tusk.frontend.nki import isa_v1 as _isa_v1
from tusk.frontend.nki import isa_v2 as _isa_v2
from tusk.frontend.nki import language as _language
from tusk.frontend.nki import lnc as _lnc
from tusk.frontend.nki import typing as _typing

# The API generation is the import name (docs/frontend.md): `nki.*` is NKI 2.x, `neuronxcc.nki.*` is 1.x.
_NKI_V1 = types.ModuleType("neuronxcc.nki", _nki.__doc__)
_NKI_V1.__dict__.update({k: v for k, v in vars(_nki).items() if not k.startswith("__")})
_NKI_V1.isa = _isa_v1
_NKI_V1.compiler = _compiler
_NKI_V1.__path__ = []  # a package, as `nki` is: absent submodules of it get stand-ins

_ISA_CONSTANTS = _isa_v1.constants  # `from neuronxcc.nki.isa.constants import dge_mode`, `from nki.isa import constants`

_LANGUAGE_CONSTANTS = types.ModuleType("neuronxcc.nki.language.constants")  # `from ... import sizeinbytes`
_LANGUAGE_CONSTANTS.sizeinbytes = lambda dtype: _language.as_dtype(dtype).itemsize

_PACKAGE = types.ModuleType("neuronxcc")
_PACKAGE.__path__ = []  # a package, so `import neuronxcc.nki.language` walks it
_PACKAGE.nki = _NKI_V1

ALIASES: dict[str, types.ModuleType] = {
    "nki": _nki,
    "nki.language": _language,
    "nki.isa": _isa_v2,
    "nki.isa.constants": _ISA_CONSTANTS,
    "nki.lnc": _lnc,
    "nki.typing": _typing,
    "nki.compiler": _compiler,
    "neuronxcc": _PACKAGE,
    "neuronxcc.nki": _NKI_V1,
    "neuronxcc.nki.language": _language,
    "neuronxcc.nki.language.constants": _LANGUAGE_CONSTANTS,
    "nki.language.constants": _LANGUAGE_CONSTANTS,
    "neuronxcc.nki.isa": _isa_v1,
    "neuronxcc.nki.isa.constants": _ISA_CONSTANTS,
    "neuronxcc.nki.typing": _typing,
    "neuronxcc.nki.compiler": _compiler,
}
NKI_ROOTS = ("nki", "neuronxcc")  # names of the NKI packages: an absent submodule is "not supported"
NKI_SUBMODULES = ("collectives",)  # NKI modules Tusk does not have: attributes of nki as stand-ins
# NKI's decorator under the names of framework packages that re-export it (torch_neuronx): kept even when the
# framework is absent, so `from torch_neuronx import nki_jit` then `@nki_jit` marks a kernel
REEXPORTED = {"torch_neuronx.nki_jit": _nki.jit, "torch_neuronx.xla_impl.ops.nki_jit": _nki.jit}


# ====================================================================== stand-ins for absent modules


class Absent(types.ModuleType):
    """An absent module, or a name taken from one (``from torch import nn``).

    Binding it costs nothing; looking into it or calling it while the file
    loads gives another stand-in (a decorator leaves the function as it is);
    using it (a call or attribute while tracing, any operator, truth value
    or iteration) is a TraceError at the line."""

    def __init__(self, name: str, imported_at: str):
        super().__init__(name)
        object.__setattr__(self, "_absent", (name, imported_at))
        self.__path__ = []  # `import torch.nn.functional` walks it

    def _refuse(self, what: str) -> TraceError:
        name, imported_at = object.__getattribute__(self, "_absent")
        where = current_user_line()
        loc = f"{where[0]}:{where[1]}: " if where else ""
        root = name.split(".")[0]
        if root in NKI_ROOTS:
            why = not_in_front_end(name)
        else:
            why = (f"{what} {name}, but {root} is not installed (nor a module of the kernel's directory): while "
                   f"tracing, a module the kernel imports and does not have is a stand-in that must not be used "
                   f"(imported at {imported_at})")
        return TraceError(loc + why)

    def __getattr__(self, attr: str) -> Any:
        from tusk.frontend.tracer import _CURRENT

        if attr == "__all__":  # `from apis import *` can bind nothing from a stand-in: the names would be missing
            raise self._refuse("the file imports * from")
        if attr.startswith("__") and attr.endswith("__"):
            raise AttributeError(attr)
        name, imported_at = object.__getattribute__(self, "_absent")
        if f"{name}.{attr}" in REEXPORTED:
            return REEXPORTED[f"{name}.{attr}"]
        child = Absent(f"{name}.{attr}", imported_at)
        if _CURRENT:  # the kernel itself reaches into it
            raise child._refuse("the kernel uses")
        return child

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        from tusk.frontend.tracer import _CURRENT

        name, imported_at = object.__getattribute__(self, "_absent")
        if _CURRENT:
            raise self._refuse("the kernel calls")
        if len(args) == 1 and not kwargs and callable(args[0]) and not isinstance(args[0], Absent):
            return args[0]  # a decorator (`@nki.compiler.skip_middle_end_transformations`): the function itself
        return Absent(f"{name}(...)", imported_at)  # a set-up call at the file's top level, or a decorator factory

    def __mro_entries__(self, bases: tuple) -> tuple:
        return ()  # `class Model(torch.nn.Module)` at the top level: a plain class (tests use it, kernels do not)

    def __bool__(self) -> bool:
        raise self._refuse("the kernel tests")

    def __iter__(self):
        raise self._refuse("the kernel iterates over")

    def __repr__(self) -> str:
        return f"<stand-in for {object.__getattribute__(self, '_absent')[0]} (not installed)>"


def _operator(op: str):
    def refuse(self: Absent, *_: Any) -> Any:
        raise self._refuse(f"the kernel computes with ({op})")
    return refuse


for _op in ("add", "radd", "sub", "rsub", "mul", "rmul", "truediv", "rtruediv", "floordiv", "rfloordiv",
            "mod", "pow", "matmul", "neg", "lt", "le", "gt", "ge", "getitem", "setitem", "len", "index",
            "int", "float", "enter"):
    setattr(Absent, f"__{_op}__", _operator(_op))


class _StandIns(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """The last finder on ``sys.meta_path`` during a trace: a module that no other finder has, imported by
    one of the kernel's files, becomes an :class:`Absent`."""

    def __init__(self, imports: KernelImports):
        self.imports = imports

    def find_spec(self, fullname: str, path: Any = None, target: Any = None):
        importer = _importing_file()
        if importer is None or not self.imports.owns(importer):
            return None
        spec = importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        spec.loader_state = f"{importer[0]}:{importer[1]}"
        return spec

    def create_module(self, spec):
        return Absent(spec.name, spec.loader_state)

    def exec_module(self, module) -> None:
        self.imports.absent.append(module.__name__)


def _importing_file() -> tuple[str, int] | None:
    """The file and line of the ``import`` statement being run (the first frame outside the import system)."""
    frame = sys._getframe(1)
    while frame is not None:
        name = frame.f_code.co_filename
        if frame.f_code.co_name == "find_spec" and name.startswith("<frozen importlib.util"):
            return None  # importlib.util.find_spec: a probe whether the module exists (it does not), no import
        if not name.startswith("<frozen importlib") and not in_tusk(name):
            return name, frame.f_lineno
        if in_tusk(name) and not name.endswith("imports.py"):
            return None  # Tusk's own code imports: never a stand-in
        frame = frame.f_back
    return None


# ====================================================================== the kernel's files


def package_root(path: Path, levels: int = 0) -> Path | None:
    """The top package directory holding ``path`` (walking up ``__init__.py`` files), or None.  ``levels``: the
    file's deepest relative import (``from ..util import x`` is 2) needs that many packages above it, with or
    without ``__init__.py`` (namespace packages)."""
    d = path.parent
    root = None
    for _ in range(levels):
        if not d.name.isidentifier() or d.parent == d:
            return None
        root, d = d, d.parent
    while (d / "__init__.py").is_file() and d.name.isidentifier():
        root = d
        if d.parent == d:
            break
        d = d.parent
    return root


def _relative_imports(path: Path) -> int:
    """The deepest relative import of the file (``from ..utils import x``: 2; 0: none).  Only a file that
    imports relatively is imported as its package's module; otherwise it runs as a script of its own
    directory, as ``python FILE.py`` would."""
    import ast

    try:
        tree = ast.parse(path.read_bytes(), filename=str(path))
    except (SyntaxError, ValueError, OSError):
        return 0  # the trace reports it when it runs the file
    return max((n.level for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)), default=0)


@dataclass
class KernelImports:
    """The kernel file's import world during one trace (see the module docstring)."""

    path: Path                                  # the kernel file, resolved
    paths: tuple[Path, ...] = ()                # directories the user named (--path): importable after root
    root: Path = field(init=False)              # the kernel tree: its directory, or its package root's parent
    module: str | None = field(init=False)      # its dotted name when it lives in a package
    absent: list[str] = field(default_factory=list)
    sources: list[Path] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.path = Path(os.path.realpath(self.path))
        self.paths = tuple(dict.fromkeys(Path(os.path.realpath(p)) for p in self.paths))
        levels = _relative_imports(self.path)
        pkg = package_root(self.path, levels) if levels else None
        if pkg is None:
            self.root, self.module = self.path.parent, None
        else:
            self.root = pkg.parent
            rel = self.path.relative_to(self.root).with_suffix("")
            parts = list(rel.parts)
            if parts[-1] == "__init__":
                parts.pop()
            self.module = ".".join(parts) if all(p.isidentifier() for p in parts) else None
            if self.module is None:
                self.root = self.path.parent

    def owns(self, where: tuple[str, int] | str) -> bool:
        """Is ``where`` (a file, or a file and line) one of the kernel tree's files?"""
        name = where[0] if isinstance(where, tuple) else where
        try:
            real = Path(os.path.realpath(name))
        except (OSError, ValueError):
            return False
        return any(real.is_relative_to(d) for d in self.roots)

    @property
    def roots(self) -> tuple[Path, ...]:
        """The kernel tree's directories: its own (or its package root's parent), then the user-named ones."""
        return (self.root, *(p for p in self.paths if p != self.root))

    def shadowed(self) -> set[str]:
        """Top-level module names the kernel tree provides (they must not resolve to a module loaded before)."""
        names = set()
        for d in self.roots:
            try:
                for p in d.iterdir():
                    if p.suffix == ".py" and p.stem.isidentifier():
                        names.add(p.stem)
                    elif p.is_dir() and (p / "__init__.py").is_file() and p.name.isidentifier():
                        names.add(p.name)
            except OSError:
                pass
        return names


API_GENERATIONS = (1, 2)


def aliases(api: int | None) -> dict[str, types.ModuleType]:
    """The NKI module names while tracing.  By default the import name is the generation (``nki`` is 2.x,
    ``neuronxcc.nki`` 1.x); ``api=1`` (``tusk trace --nki-api 1``) makes ``nki`` the 1.x modules too, for
    kernels written in 1.x calls under the ``nki`` name (leanprover/KLR's example kernels, whose ``nki``
    is KLR's own 1.x-style package)."""
    if api in (None, 2):
        return ALIASES
    if api != 1:
        raise TraceError(f"NKI API generation {api!r} (there are {' and '.join(map(str, API_GENERATIONS))})")
    return {**ALIASES, "nki": _NKI_V1, "nki.isa": _isa_v1}


def _alias_state() -> dict[int, tuple[types.ModuleType, set[str]]]:
    return {id(m): (m, set(vars(m))) for m in ALIASES.values()}


@contextlib.contextmanager
def numpy_names() -> Iterator[None]:
    """NKI dtypes numpy has no type for (``nl.bfloat16``, the float8 kinds) as numpy dtype names while a kernel
    is traced: ``np.dtype(nl.bfloat16).itemsize`` is 2, as with NKI's own dtypes (kernels size their direct
    allocations so).  The dtype is raw bytes of that size (``V2``): arithmetic on it fails, nothing computes
    with it silently.  Names numpy already has are left alone; all are removed afterwards."""
    import numpy as np

    from tusk.frontend.klr_writer import DTYPE_BYTES

    added = []
    for name, size in DTYPE_BYTES.items():
        try:
            np.dtype(name)
        except TypeError:
            np.sctypeDict[name] = np.dtype(f"V{size}")
            added.append(name)
    try:
        yield
    finally:
        for name in added:
            np.sctypeDict.pop(name, None)


# The Neuron compiler's logging set-up adds a level above CRITICAL that kernel files name right after
# importing it (`logging.disable(logging.OFF)`, as the Stanford CS149 Trainium kernels do).
_LOGGING_NAMES = {"OFF": logging.CRITICAL + 10}


@contextlib.contextmanager
def logging_names() -> Iterator[None]:
    """The logging levels the Neuron SDK adds, as ``logging`` names while a kernel is traced; names logging
    already has are left alone, the added ones are removed afterwards."""
    added = [name for name in _LOGGING_NAMES if not hasattr(logging, name)]
    for name in added:
        setattr(logging, name, _LOGGING_NAMES[name])
    try:
        yield
    finally:
        for name in added:
            delattr(logging, name)


@contextlib.contextmanager
def kernel_imports(path: str | os.PathLike, paths: Sequence[str | os.PathLike] = (),
                   api: int | None = None) -> Iterator[KernelImports]:
    """The import world of tracing ``path`` (``paths``: directories the user named, importable after the
    kernel's own; ``api=1``: ``import nki`` is NKI 1.x too, see :func:`aliases`); on exit everything is as
    it was (``sources`` is filled)."""
    ki = KernelImports(Path(path), tuple(Path(p) for p in paths))
    saved_path = list(sys.path)
    before = dict(sys.modules)
    attrs = _alias_state()
    for m in (_language, _isa_v1, _isa_v2, _typing, _compiler):
        m.__path__ = []  # packages while tracing: `from nki.isa.constants import x` reaches the stand-ins
    for sub in NKI_SUBMODULES:  # `nki.compiler.sbuf.mod_alloc` at a file's top level, without an import
        for pkg in (_nki, _NKI_V1):  # both API generations' nki packages
            setattr(pkg, sub, Absent(f"nki.{sub}", "nki"))
    shadowed = ki.shadowed()
    hidden = {n: m for n, m in sys.modules.items() if n.split(".")[0] in shadowed and _hideable(n, m)}
    for n in hidden:
        del sys.modules[n]
    finder = _StandIns(ki)
    sys.path[0:0] = [str(d) for d in ki.roots]
    sys.modules.update(aliases(api))
    sys.meta_path.append(finder)
    # `import neuronxcc.nki.language.constants as c` reads the submodule as an attribute of its package
    _language.constants = _LANGUAGE_CONSTANTS
    sdk_names = contextlib.ExitStack()
    sdk_names.enter_context(numpy_names())
    sdk_names.enter_context(logging_names())
    try:
        yield ki
    finally:
        sdk_names.close()
        with contextlib.suppress(ValueError):
            sys.meta_path.remove(finder)
        sys.path[:] = saved_path
        ki.sources = sorted({f for n, m in sys.modules.items() if before.get(n) is not m
                             for f in [_module_file(m)] if f is not None and _ours(ki, n, f)})
        for n in [n for n, m in sys.modules.items() if before.get(n) is not m and _forget(ki, n, m)]:
            del sys.modules[n]  # the kernel's modules and stand-ins; installed ones imported now are kept
        for n, m in before.items():
            sys.modules[n] = m
        for n, m in hidden.items():
            sys.modules.setdefault(n, m)
        for m, names in attrs.values():
            for attr in set(vars(m)) - names:
                delattr(m, attr)  # `import nki.compiler` set nki.compiler on Tusk's module


def _forget(ki: KernelImports, name: str, m: Any) -> bool:
    """Is ``m`` (imported during the trace) the kernel's, to be read again by the next trace?  Never Tusk's own
    modules (one front end per process) nor installed packages (an extension module loads once)."""
    if name == "tusk" or name.startswith("tusk."):
        return False
    if isinstance(m, Absent) or name in ALIASES or name.split(".")[0] in NKI_ROOTS:
        return True
    f = _module_file(m)
    return f is not None and _ours(ki, name, f)


def _ours(ki: KernelImports, name: str, f: Path) -> bool:
    """A file of the kernel tree (not Tusk's, which the trace key covers as the front end's code)."""
    return not (name == "tusk" or name.startswith("tusk.")) and ki.owns(str(f)) and not in_tusk(str(f))


_ENVIRONMENT = tuple({os.path.realpath(p) + os.sep for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)})


def _hideable(name: str, m: Any) -> bool:
    """A module loaded before the trace that a same-named file of the kernel's directory replaces for the
    trace: one from elsewhere (another project's ``helpers``), never Python's, an installed package or
    Tusk (code already running holds them; Python itself would not replace them either)."""
    f = _module_file(m)
    return (f is not None and not name.startswith("tusk") and not str(f).startswith(_ENVIRONMENT)
            and not in_tusk(str(f)))


def _module_file(m: Any) -> Path | None:
    f = getattr(m, "__file__", None) if isinstance(m, types.ModuleType) else None
    if not isinstance(f, str):
        return None
    try:
        return Path(os.path.realpath(f))
    except (OSError, ValueError):
        return None


@contextlib.contextmanager
def nki_modules() -> Iterator[None]:
    """Only the NKI names (tracing a function already loaded: its lazy ``import nki.language`` works)."""
    saved = {name: sys.modules.get(name) for name in ALIASES}
    sys.modules.update(ALIASES)
    try:
        yield
    finally:
        for name, module in saved.items():
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module
