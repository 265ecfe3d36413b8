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

from tusk.ir.klr import types
from tusk.ir.klr.jsonform import from_json, to_json
from tusk.ir.klr.kernel import iter_operators, load_lnc_kernel, payload_fields, tensor_of, tensor_operands
from tusk.ir.klr.listing import listing
from tusk.ir.klr.pretty import pretty
from tusk.ir.klr.reader import read_header, read_klr, read_value
from tusk.ir.klr.types import KLRFileContents
from tusk.ir.klr.wire import MAGIC, is_klr_bytes
from tusk.ir.klr.writer import default_file, write_klr, write_value

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
