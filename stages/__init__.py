"""The one registry of passes, by the backend's pass names.

The pipeline, the CLI (`tusk compile`, `tusk passes`), `full_unroll`, the
build's workers, tests and benchmarks all find passes here.  A pass's module
is imported only when the pass is used, so `tusk show` does not pay for the
unroller.

* :func:`get_all_passes` -- name -> loader of the class;
* :func:`pass_class` -- the class registered as ``name``;
* :func:`make_pass` / :func:`parse_pass` -- an instance from option values or
  from its spec string ``name{opt=value ...}``;
* :func:`load_external` -- a ``"package.module:Class"`` reference (a pipeline
  file may use a pass that is not registered); it must be a :class:`Pass`.
"""

from __future__ import annotations

import functools
import importlib
from typing import Any, Callable

from tusk.ir.errors import InternalError, UsageError
from tusk.stages.base import OptionError, Pass, parse_spec

# name -> "module:Class", imported on first use
REGISTRY: dict[str, str] = {
    "translate_nki_ast_to_bir": "tusk.stages.translate_nki_ast_to_bir:TranslateNKIASTToBIR",
    "raise_loops": "tusk.stages.raise_loops:RaiseLoops",
    "heuristic_unroll": "tusk.stages.heuristic_unroll:HeuristicUnroll",
    "unroll": "tusk.stages.unroll:Unroll",
    "full_unroll": "tusk.stages.full_unroll:FullUnroll",
    "build_fdeps": "tusk.stages.build_fdeps:BuildFDeps",
    "clear_inst_deps": "tusk.stages.clear_inst_deps:ClearInstDeps",
    "address_rotation_psum": "tusk.stages.address_rotation_psum:AddressRotationPSUM",
    "address_rotation_sb": "tusk.stages.address_rotation_sb:AddressRotationSB",
    "address_rotation_dram": "tusk.stages.address_rotation_dram:AddressRotationDRAM",
    "address_rotation_psum_post_schedule": "tusk.stages.address_rotation_psum_post_schedule:AddressRotationPSUMPostSchedule",
    "schedule": "tusk.stages.schedule:Schedule",
}


class UnknownPass(OptionError):
    """No pass is registered under the name."""


def get_all_passes() -> dict[str, Callable[[], type[Pass]]]:
    """Every registered name with a loader of its class (nothing is imported until a loader is called)."""
    return {name: functools.partial(pass_class, name) for name in REGISTRY}


def pass_class(name: str) -> type[Pass]:
    """The class registered as ``name``."""
    target = REGISTRY.get(name)
    if target is None:
        raise UnknownPass(f"unknown pass {name!r} (known: {', '.join(sorted(REGISTRY))})")
    cls = _import(target)
    if cls.name != name:
        raise InternalError(f"pass class {target} is registered as {name!r} but calls itself {cls.name!r}")
    return cls


def target_of(cls: type[Pass]) -> str:
    """``"module:Class"``: how a worker imports ``cls``."""
    return f"{cls.__module__}:{cls.__qualname__}"


def make_pass(name: str, **options: Any) -> Pass:
    """The pass registered as ``name`` with ``options`` (typed values or text)."""
    return pass_class(name).with_options(options)


def parse_pass(spec: str) -> Pass:
    """Inverse of ``str(pass)``: ``unroll{loops=marked}`` -> ``Unroll(loops="marked")``."""
    name, values = parse_spec(spec)
    return make_pass(name, **values)


def load_external(ref: str) -> type[Pass]:
    """The pass class behind ``"package.module:Class"``; a TuskError if it is not a Pass."""
    try:
        cls = _import(ref)
    except (ImportError, AttributeError, ValueError) as e:
        raise UsageError(f"pass {ref!r} cannot be imported: {e}") from None
    if not (isinstance(cls, type) and issubclass(cls, Pass) and cls.name):
        raise UsageError(f"pass {ref!r} is not a pass (a frozen dataclass subclass of tusk.stages.base.Pass "
                         f"with a name)")
    return cls


def resolve_target(target: str) -> type[Pass]:
    """The class behind a target written by :func:`target_of` (what workers call)."""
    return _import(target)


def _import(target: str) -> Any:
    module_name, _, attr = target.partition(":")
    if not attr:
        raise ValueError(f"expected package.module:Class, got {target!r}")
    obj: Any = importlib.import_module(module_name)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj
