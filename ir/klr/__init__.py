"""KLR binary files (format 0.0.12): the backend's reader and writer for KLIR.

A ``.klr`` file is three CBOR items back to back: the ``KLRFile`` version
header, ``KLRMetaData`` and ``Contents``; a backend wants Contents ``lnc``,
an ``LncKernel``.  The whole format is driven by one table,
:data:`ir.klr.schema.SCHEMA`, from which the value classes
(:mod:`ir.klr.types`), the reader and the writer are generated.

Public API::

    read_klr(data, *, file=None) -> KLRFileContents   # header, metadata, contents
    write_klr(obj) -> bytes                            # inverse; accepts a bare LncKernel too
    load_lnc_kernel(path) -> LncKernel                 # + version / content-type checks
    to_json(obj) / from_json(value)                    # the fixtures' .expected.json form
    pretty(obj) -> str                                 # KLR's C++ klr::to_string
    listing(obj) -> str                                # human-readable `tusk show` text
    tensor_of(ref), iter_operators(kernel, core), tensor_operands(payload)

Value classes: see :mod:`ir.klr.types` (``TensorName``, ``Access.birPattern``
a.k.a. ``Access_birPattern``, ``Dtype.float32``...).
"""

import importlib
from typing import Any

# Imported on first use (PEP 562): the value classes are generated when tusk.ir.klr.types loads (~0.2 s),
# which a no-op rebuild, `tusk --help` or a BIR-JSON-only build never needs.
_WHERE = {
    "types": None, "from_json": "jsonform", "to_json": "jsonform", "iter_operators": "kernel",
    "load_lnc_kernel": "kernel", "payload_fields": "kernel", "tensor_of": "kernel", "tensor_operands": "kernel",
    "listing": "listing", "pretty": "pretty", "read_header": "reader", "read_klr": "reader",
    "read_value": "reader", "KLRFileContents": "types", "MAGIC": "magic", "is_klr_bytes": "magic",
    "default_file": "writer", "write_klr": "writer", "write_value": "writer",
}


def __getattr__(name: str) -> Any:
    where = _WHERE.get(name, "")
    if where == "" and name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module = importlib.import_module(f"{__name__}.{where or name}")
    value = module if where is None else getattr(module, name)
    globals()[name] = value
    return value


__all__ = [
    "KLRFileContents",
    "MAGIC",
    "is_klr_bytes",
    "default_file",
    "from_json",
    "iter_operators",
    "listing",
    "load_lnc_kernel",
    "payload_fields",
    "pretty",
    "read_header",
    "read_klr",
    "read_value",
    "tensor_of",
    "tensor_operands",
    "to_json",
    "types",
    "write_klr",
    "write_value",
]
