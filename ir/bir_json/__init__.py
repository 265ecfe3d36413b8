"""BIR-JSON in and out (docs/bir-json.md; evidence in ../shared/specs/bir-json-evidence.md).

Reading.  Every shape the public evidence shows is read: instruction names
are labels (they may repeat; a dependency resolves in its own block first,
then function-wide when the name is unique there), KLR's loop record without
``name``/``engine``/``ins``/``outs``, function attributes as a list or an
object (unknown names kept), SB/PSUM ``dims`` with more than two entries,
``symbolic_ap`` with one address per dimension, non-finite immediates as
``"inf"``/``"-inf"``/``"nan"``, dtype ``bool``, KLR's extra opcodes,
allocations without ``name``, ``register_ap`` without ``regref``.  Clone
names ``<base>-it<k>`` are read as clone ``k`` of ``base`` (as
:func:`tusk.ir.serial.content_hash` does).  Every refusal is a
:class:`~tusk.ir.errors.FormatError` naming the file, the JSON path and the
problem; integers are checked against their ranges (int64 at most), nesting
is bounded, and no other exception leaves the reader.

Writing.  Objects are written in one *policy* spelling, the keys the
backend's own tools read (``docs/bir-json.md``), with keys sorted as
nlohmann's ``std::map`` does.  What a document spelled differently is kept as
a wire patch (:mod:`tusk.ir.wire`), so ``save(load(doc))`` reproduces the
document's keys and values.  The writer streams; runs of instructions that
differ only in clone iteration, operand offsets and dependency iterations
are filled from templates over the numpy columns.

``flatten=True`` (or :func:`flatten_kernel`) writes each kernel function as
``functions[i]`` named ``sg0000``, ``sg0001``, ... without the host ``main``:
the per-core shape of the dumps the public checkers read.

Files ending in ``.gz`` are read and written gzip-compressed.

The package, by seam (each module imports only the ones above it):

* ``fields`` -- the reader's typed field checks (FormatError with the JSON path);
* ``policy`` -- the policy spelling both directions share (keys, defaults, heads);
* ``render`` -- one instruction or operand in the policy spelling (the generic path);
* ``refs`` -- name references resolved to row edges;
* ``reader`` -- the ordinary reader (one object per instruction);
* ``digits``, ``layouts``, ``column_writer`` -- the writer's columnar path;
* ``column_reader`` -- the loader's columnar path (runs of one-line instructions);
* ``writer`` -- the streaming writer; ``parts`` -- a document in parts;
* ``loading`` -- ``load``/``loads``: columnar first, the ordinary reader otherwise.
"""

from __future__ import annotations

from tusk.ir.bir_json.loading import load, loads
from tusk.ir.bir_json.parts import join, part_bounds, render_part, render_parts, write_part
from tusk.ir.bir_json.policy import FLAG_KEYS
from tusk.ir.bir_json.reader import from_obj, load_function_obj, parse_json
from tusk.ir.bir_json.writer import dumps, flatten_kernel, save, write, write_function

__all__ = ["load", "loads", "from_obj", "load_function_obj", "save", "dumps", "write", "write_function",
           "flatten_kernel", "parse_json", "FLAG_KEYS", "part_bounds", "render_part", "render_parts", "write_part", "join"]
