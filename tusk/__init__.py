"""Tusk: a tensor-compiler backend pipeline for NKI kernels.

The code lives in sub-packages that sit at the repository root and install
under this one name: ``tusk.ir`` (the BIR data model and wire formats),
``tusk.stages`` (passes), ``tusk.sim`` (interpreter and timing model),
``tusk.cache`` (the module store), ``tusk.workflows`` (builds and the CLI)
and ``tusk.examples`` (the shipped kernel corpus).
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as _version

try:
    __version__ = _version("tusk")
except PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0+unknown"
