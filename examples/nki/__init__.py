"""NKI kernels written as NKI users write them (the tutorials' kernels), traced by ``tusk.frontend``.

The kernels are package data (``*.py`` files read by the tracer, not imported
as modules); ``tusk.toml`` names each kernel unit and its input specs, and
:mod:`tusk.examples.nki.reference` holds the numpy reference of each.
"""

from pathlib import Path

DIRECTORY = Path(__file__).resolve().parent
