"""The NKI Python front end: trace a kernel written against ``nki.language`` / ``nki.isa`` into KLR.

    from tusk.frontend import trace_file
    data = trace_file("kernels/tensor_add.py", "nki_tensor_add", ["f32[128,512]", "f32[128,512]"])
    open("tensor_add.klr", "wb").write(data)     # KLR 0.0.12, what `tusk compile` reads

Tracing *executes* the kernel's Python, as NKI itself does: the kernel file's
top level runs, then the kernel function runs once with symbolic tensors.
While it runs, ``import neuronxcc.nki.language as nl`` (and ``nki``,
``nki.language``, ``nki.isa``, ``nki.typing`` and their ``neuronxcc.``
forms) resolve to :mod:`tusk.frontend.nki`; nothing is installed under those
names.  Its helpers and package import, absent packages it never uses are
stand-ins (:mod:`tusk.frontend.imports`); non-tensor parameters are given by
name (``args={"eps": 1e-6}``, :mod:`tusk.frontend.args`).

See docs/frontend.md for the supported API and the tracing model.
"""

from __future__ import annotations

from tusk.frontend.specs import TensorSpec, parse_tensor_spec
from tusk.frontend.trace import TraceError, trace_file, trace_function

__all__ = ["TensorSpec", "TraceError", "parse_tensor_spec", "trace_file", "trace_function"]
