"""Passes, registered lazily by the backend's pass names.

``get_pass(name)`` imports the module that defines a pass only when it is
used, so `tusk show` does not pay for the unroller.
"""

from __future__ import annotations

import importlib
import importlib.util

from tusk.ir.errors import TuskError

# name -> "module:Class"
REGISTRY: dict[str, str] = {
    "translate_nki_ast_to_bir": "tusk.stages.translate_nki_ast_to_bir:TranslateNKIASTToBIR",
    "heuristic_unroll": "tusk.stages.heuristic_unroll:HeuristicUnroll",
    "unroll": "tusk.stages.unroll:Unroll",
    "full_unroll": "tusk.stages.full_unroll:FullUnroll",
    "build_fdeps": "tusk.stages.deps:BuildFDeps",
    "clear_inst_deps": "tusk.stages.deps:ClearInstDeps",
}


def available() -> list[str]:
    """Registered names whose module exists in this checkout."""
    out = []
    for name, target in REGISTRY.items():
        module = target.split(":")[0]
        if importlib.util.find_spec(module) is not None:
            out.append(name)
    return out


def get_pass(name: str):
    """A new instance of the pass registered as ``name``."""
    target = REGISTRY.get(name)
    if target is None:
        raise TuskError(f"unknown pass {name!r} (known: {', '.join(sorted(REGISTRY))})")
    module_name, cls_name = target.split(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        if e.name == module_name:
            raise TuskError(f"pass {name!r} is not available in this build") from None
        raise
    cls = getattr(module, cls_name)
    if cls.name != name:
        raise TuskError(f"pass class {cls_name} is registered as {name!r} but calls itself {cls.name!r}")
    return cls()
