"""While a kernel file is traced, ``nki`` and ``neuronxcc.nki`` resolve to Tusk's front end.

The names are bound in ``sys.modules`` for the duration of the trace only and
the previous bindings (a real ``nki`` package, or nothing) are restored after,
so nothing is installed under those names and other code in the process is
unaffected once tracing ends.
"""

from __future__ import annotations

import contextlib
import sys
import types
from collections.abc import Iterator

from tusk.frontend import nki as _nki
from tusk.frontend.nki import isa_v1 as _isa_v1
from tusk.frontend.nki import isa_v2 as _isa_v2
from tusk.frontend.nki import language as _language

# The API generation is the import name (docs/frontend.md): `nki.*` is NKI 2.x, `neuronxcc.nki.*` is 1.x.
_NKI_V1 = types.ModuleType("neuronxcc.nki", _nki.__doc__)
_NKI_V1.__dict__.update({k: v for k, v in vars(_nki).items() if not k.startswith("__")})
_NKI_V1.isa = _isa_v1

_ISA_CONSTANTS = types.ModuleType("neuronxcc.nki.isa.constants")  # `from neuronxcc.nki.isa.constants import dge_mode`
_ISA_CONSTANTS.__dict__.update(_isa_v1.ENUMS)

_PACKAGE = types.ModuleType("neuronxcc")
_PACKAGE.__path__ = []  # a package, so `import neuronxcc.nki.language` walks it
_PACKAGE.nki = _NKI_V1

ALIASES: dict[str, types.ModuleType] = {
    "nki": _nki,
    "nki.language": _language,
    "nki.isa": _isa_v2,
    "neuronxcc": _PACKAGE,
    "neuronxcc.nki": _NKI_V1,
    "neuronxcc.nki.language": _language,
    "neuronxcc.nki.isa": _isa_v1,
    "neuronxcc.nki.isa.constants": _ISA_CONSTANTS,
}


@contextlib.contextmanager
def nki_modules() -> Iterator[None]:
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
