"""Tusk: a tensor-compiler backend pipeline for NKI kernels.

The code lives in sub-packages that sit at the repository root and install
under this one name: ``tusk.ir`` (the BIR data model and wire formats),
``tusk.stages`` (passes), ``tusk.sim`` (interpreter and timing model),
``tusk.cache`` (the module store), ``tusk.workflows`` (builds and the CLI)
and ``tusk.examples`` (the shipped kernel corpus).

For notebooks and scripts (``import tusk`` stays cheap: each function
imports what it needs when called)::

    import tusk

    result = tusk.compile_directory("kernels/", out="build/", workers=0)
    print(result.exit_code, [k.kernel.name for k in result.failed])   # build/report.html has the pictures

    m = tusk.load("kernels/rmsnorm.klr")           # a BIR Module (KLR translated as the build does)
    tusk.show(m, engine="pe", limit=20)            # the listing `tusk show` prints
    text = tusk.listing("build/rmsnorm/rmsnorm.bir.json", function="rmsnorm")
"""

from __future__ import annotations

import os
import sys
from typing import Any, Iterable

__all__ = ["__version__", "compile_directory", "load", "show", "listing"]


def compile_directory(directory: str | os.PathLike | None = None, out: str | os.PathLike = "tusk-out", *,
                      sets: Iterable[str] = (), pipeline: str | os.PathLike | None = None, stages: bool = False,
                      stage: Iterable[str] = (), report: bool = True, progress: str = "off",
                      no_cache: bool = False, core_id: int | None = None, dashboard: bool = False,
                      **settings: Any):
    """Compile every kernel of ``directory`` into ``out``, as ``tusk compile`` does; returns the
    ``CompileResult`` (``.kernels``, ``.failed``, ``.report``, ``.exit_code``, ``.to_json()``).

    ``settings``: ``workers``, ``scheduler``, ``cache_dir``, ``verify``,
    ``arch``, ``instruction_limit``, ``maxhu`` (over the directory's
    tusk.toml, over the environment).  ``sets`` are ``"pass.option=value"``.
    ``report`` writes ``out/report.html`` and the traces; ``progress`` is
    ``"off"``, ``"plain"``, ``"live"`` or ``"auto"``.  A request that cannot
    be built raises a ``tusk.ir.errors.TuskError`` before anything is written.
    """
    from pathlib import Path

    from rich.console import Console

    from tusk.workflows.compile import compile_directory as run
    from tusk.workflows.observe import Reporter, Tee
    from tusk.workflows.progress import History, make_display
    from tusk.workflows.project import EXAMPLES, prepare_request

    req, cfg, _ = prepare_request(Path(directory) if directory is not None else EXAMPLES, Path(out),
                                  sets=list(sets), pipeline=Path(pipeline) if pipeline else None, stages=stages,
                                  stage=list(stage), dashboard=dashboard, no_cache=no_cache, core_id=core_id,
                                  **settings)
    history = History.of(cfg)
    display = make_display(progress, Console(stderr=True, highlight=False), history=history)
    reporter = Reporter(None if no_cache else history, display.state, report=report,
                        warn=lambda text: print(f"warning: {text}", file=sys.stderr))
    try:
        return run(req, events=Tee(display, reporter))
    finally:
        display.stop()


def load(path: str | os.PathLike, core: int = 0):
    """The BIR ``Module`` of a kernel file: BIR-JSON as written, KLR translated as the build does it."""
    from tusk.workflows.show import load as load_any

    return load_any(path, core)


def listing(what, *, function: str | None = None, engine: str | Iterable[str] | None = None,
            limit: int | None = None, tensors: bool = True) -> str:
    """The listing of a module or kernel file (``tusk show``'s notation) as one string."""
    return "\n".join(_lines(what, function, engine, limit, tensors)) + "\n"


def show(what, *, function: str | None = None, engine: str | Iterable[str] | None = None,
         limit: int | None = None, tensors: bool = True, file=None) -> None:
    """Print the listing of a module or kernel file (to ``file``, default stdout), line by line."""
    out = file or sys.stdout
    for line in _lines(what, function, engine, limit, tensors):
        out.write(line + "\n")


def _lines(what, function, engine, limit, tensors):
    from tusk.workflows.show import Filter, engine_codes, iter_listing
    from tusk.workflows.show import load as load_any

    module = load_any(what) if isinstance(what, (str, os.PathLike)) else what
    engines = [engine] if isinstance(engine, str) else engine
    flt = Filter(function=function, engines=engine_codes(engines) if engines else None, limit=limit, tensors=tensors)
    return iter_listing(module, flt)


def __getattr__(name: str) -> Any:
    """``tusk.__version__``, read from the installed metadata when first asked for (importlib.metadata
    costs a command that never prints the version tens of milliseconds)."""
    if name != "__version__":
        raise AttributeError(f"module 'tusk' has no attribute {name!r}")
    from importlib.metadata import PackageNotFoundError, version

    try:
        value = version("tusk")
    except PackageNotFoundError:  # running from a source tree that is not installed
        value = "0+unknown"
    globals()["__version__"] = value
    return value
