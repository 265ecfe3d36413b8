"""aws-neuron/nki-samples tutorials (src/nki_samples/tutorials)."""

from __future__ import annotations

from .entry import Entry

T = "aws-neuron+nki-samples/src/nki_samples/tutorials"

ENTRIES = [
    Entry("tut_tensor_add_kernel", "tutorials", f"{T}/tensor_addition/tensor_addition_nki_kernels.py",
          "nki_tensor_add_kernel_", ("f32[128,512]", "f32[128,512]"), lambda x, a: [x[0] + x[1]], grid="1,1"),
]
