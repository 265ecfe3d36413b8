"""What ``nki.isa`` calls share across both API generations: binding by the documented signature, the
configuration enums, and the refusal of names the front end does not have.

Each public ``nisa`` function is written with its documented signature (the NKI API reference of its
generation) and wrapped by :func:`documented`, which binds the kernel's positional and keyword
arguments to it before the body runs.  An unknown keyword, a missing argument or one positional too many
is refused naming the call and the argument, at the kernel's line: nothing is swallowed.
"""

from __future__ import annotations

import contextlib
import enum
import functools
import inspect
import types
from collections.abc import Callable, Iterator
from typing import Any

from tusk.frontend.errors import TraceError, Unsupported, current_user_line, not_in_front_end

# the keywords of a call that only choose an engine, a DMA queue or a debug name: same numbers either way
HINTS = ("engine", "name", "priority", "dge_mode", "oob_mode")


def documented(call: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Bind a call's arguments by the wrapped function's own signature (the documented one)."""
    def wrap(fn: Callable[..., Any]) -> Callable[..., Any]:
        sig = inspect.signature(fn)
        names = tuple(sig.parameters)

        @functools.wraps(fn)
        def entry(*args: Any, **kwargs: Any) -> Any:
            # NKI 2.x tutorials still pass 1.x's dtype= beside dst; it can only restate dst's dtype
            restated = kwargs.pop("dtype", None) if "dst" in names and "dtype" not in names else None
            if "name" not in names:
                kwargs.pop("name", None)  # an instruction's label (1.x kernels pass it too): no effect here
            unknown = [k for k in kwargs if k not in names]
            if unknown:
                raise Unsupported(f"{call}: unknown keyword argument {unknown[0]!r} (its parameters: "
                                  f"{', '.join(names)})")
            try:
                bound = sig.bind(*args, **kwargs)
            except TypeError as e:
                raise Unsupported(f"{call}{signature_text(sig)}: {e}") from None
            bound.apply_defaults()
            if restated is not None:
                _same_dtype(call, restated, bound.arguments["dst"])
            return fn(*bound.args, **bound.kwargs)

        entry.nisa_call = call
        return entry
    return wrap


def _same_dtype(call: str, dtype: Any, dst: Any) -> None:
    from tusk.frontend.tensors import as_dtype
    have = getattr(dst, "dtype", None)
    if have is None or as_dtype(dtype) != have:
        raise Unsupported(f"not supported: {call} dtype={dtype!r} (a 2.x call writes dst's dtype, {have!r}; "
                          "dtype= is not in its signature)")


def missing_name(module: str, dotted: str, name: str) -> Any:
    """A name of an NKI module the front end lacks: while the file loads (``from nki.isa import core_barrier``
    at its top, used by a kernel of the file that is not traced), a stand-in that is refused where a kernel
    uses it; while a kernel is traced, refused at its line."""
    from tusk.frontend.tracer import _CURRENT

    if _CURRENT:
        raise unknown_name(module, name)
    from tusk.frontend.imports import Absent

    where = current_user_line()
    return Absent(f"{dotted}.{name}", f"{where[0]}:{where[1]}" if where else "the file's top level")


def unknown_name(module: str, name: str) -> TraceError:
    """``nisa.NAME`` / ``from nki.isa import NAME`` for a NAME the front end lacks, at the kernel's line
    (located here: an import-time error would otherwise carry no line)."""
    where = current_user_line()
    loc = f"{where[0]}:{where[1]}: " if where else ""
    return TraceError(f"{loc}{not_in_front_end(f'{module}.{name}')}")


def signature_text(sig: inspect.Signature) -> str:
    """A signature as the kernel author reads it: defaults that are nl functions print as ``nl.NAME``."""
    params = []
    for p in sig.parameters.values():
        d = p.default
        if d is not p.empty and callable(d) and hasattr(d, "__name__"):
            p = p.replace(default=_Spelled(f"nl.{d.__name__}"))
        params.append(p)
    return str(sig.replace(parameters=params, return_annotation=inspect.Signature.empty))


class _Spelled(str):
    def __repr__(self) -> str:
        return str(self)


def public_calls(module: Any) -> dict[str, Callable[..., Any]]:
    """The documented calls of an isa module by name (docs/frontend.md's table is made from them)."""
    return {k: v for k, v in sorted(vars(module).items()) if callable(v) and hasattr(v, "nisa_call")}


def api_table() -> str:
    """The supported ``nisa`` calls of both generations with their signatures, as docs/frontend.md shows
    them (tests/test_frontend_isa_docs.py checks the page against it)."""
    from tusk.frontend.nki import isa_v1, isa_v2
    v1, v2 = public_calls(isa_v1), public_calls(isa_v2)

    def sig(fn: Any) -> str:
        return f"`{signature_text(inspect.signature(fn))}`".replace("|", "\\|") if fn else "—"

    rows = ["| call | NKI 1.x (`neuronxcc.nki.isa`) | NKI 2.x (`nki.isa`) |", "|---|---|---|"]
    rows += [f"| `nisa.{n}` | {sig(v1.get(n))} | {sig(v2.get(n))} |" for n in sorted({*v1, *v2})]
    return "\n".join(rows) + "\n"


# ---------------------------------------------------------------------------- configuration enums
class _Named:
    """Enum members print as kernels spell them (``nisa.engine.vector``)."""

    def __repr__(self) -> str:
        return f"nisa.{type(self).__name__}.{self.name}"

    __str__ = __repr__


class engine(_Named, enum.IntEnum):
    """NeuronCore engines (``nisa.engine.vector`` ...): an engine choice never changes the numbers."""
    unknown = 0
    tensor = 1
    scalar = 2
    gpsimd = 3
    dma = 4
    vector = 5
    sync = 6


class reduce_cmd(_Named, enum.IntEnum):
    """Engine accumulator commands (activation, tensor_scalar_reduce ... ``reduce_cmd=``)."""
    idle = 0
    reset = 1
    reduce = 2
    reset_reduce = 3
    load_reduce = 4


class dge_mode(_Named, enum.IntEnum):
    unknown = 0
    swdge = 1
    hwdge = 2
    none = 3


class oob_mode(_Named, enum.IntEnum):
    error = 0
    skip = 1


class dma_engine(_Named, enum.IntEnum):
    dma = 1
    gpsimd_dma = 2


class matmul_perf_mode(_Named, str, enum.Enum):
    none = "none"
    double_row = "double_row"


class nc_version(_Named, enum.IntEnum):
    gen2 = 2
    gen3 = 3
    gen4 = 4


# the 1.x module-level engine names (2.x keeps them, deprecated)
tensor_engine, vector_engine, scalar_engine = engine.tensor, engine.vector, engine.scalar
gpsimd_engine, sync_engine, unknown_engine = engine.gpsimd, engine.sync, engine.unknown

ENUMS: dict[str, Any] = {"engine": engine, "reduce_cmd": reduce_cmd, "dge_mode": dge_mode, "oob_mode": oob_mode,
         "dma_engine": dma_engine, "matmul_perf_mode": matmul_perf_mode, "nc_version": nc_version,
         "tensor_engine": tensor_engine, "vector_engine": vector_engine, "scalar_engine": scalar_engine,
         "gpsimd_engine": gpsimd_engine, "sync_engine": sync_engine, "unknown_engine": unknown_engine}

# ``nki.isa.constants`` (``from nki.isa import constants``; 1.x ``neuronxcc.nki.isa.constants``): the enums
constants = types.ModuleType("nki.isa.constants", "The nki.isa configuration enums.")
constants.__dict__.update(ENUMS)


# Tusk's architectures (tusk.ir.arch) by the NeuronCore generation a kernel asks about
_NC_VERSION = {"sunda": nc_version.gen2, "gen3": nc_version.gen3, "core_v4": nc_version.gen4}


_TARGET: list[str | None] = []  # the architecture of the trace under way (its file's top level included)


@contextlib.contextmanager
def targeting(arch: str | None) -> Iterator[None]:
    """While a kernel file is loaded and traced for ``arch`` (``tusk trace --arch``)."""
    _TARGET.append(arch)
    try:
        yield
    finally:
        _TARGET.pop()


def get_nc_version() -> nc_version:
    """The NeuronCore the trace targets (``tusk trace --arch``; trn2, gen3, by default): kernels choose their
    code paths by it."""
    from tusk.ir.arch import get_arch

    arch = get_arch(_TARGET[-1] if _TARGET else None).name
    if arch not in _NC_VERSION:
        raise Unsupported(f"not supported: nisa.get_nc_version() for architecture {arch} (NKI names gen2 to gen4)")
    return _NC_VERSION[arch]


def get_nc_sub_version() -> int:
    """The silicon revision within the NeuronCore generation: Tusk models the first (0)."""
    return 0
