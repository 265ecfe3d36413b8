"""The shipped BIR-JSON kernels: generated reproducibly, verified, and computing what they claim."""

from __future__ import annotations

import numpy as np
import pytest

from tusk.examples import bir_kernels
from tusk.examples.generate import KERNELS
from tusk.examples.generate import main as generate_main
from tusk.ir import bir_json
from tusk.ir.verify import verify
from tusk.sim.interp import random_inputs, run, same_outputs
from tusk.stages.full_unroll import FullUnroll


def test_committed_corpus_matches_the_generator():
    assert generate_main(["--check"]) == 0


@pytest.mark.parametrize("name", sorted(bir_kernels.CORPUS))
def test_kernel_unrolls_and_matches_its_numpy_reference(name):
    module = bir_json.load(KERNELS / f"{name}.json")
    verify(module)
    _, reference = bir_kernels.CORPUS[name]()
    out, stats = FullUnroll(level=1).run(module)
    verify(out)
    assert stats["unrolled_functions"] == 1
    inputs = random_inputs(module, seed=3)
    before, after = run(module, inputs), run(out, inputs)
    assert same_outputs(before, after)
    want = reference(inputs)
    for key, value in want.items():
        # float32 sums in another order: tolerate rounding relative to the output's scale
        scale = float(np.abs(value).max()) or 1.0
        np.testing.assert_allclose(after[key], value, rtol=2e-5, atol=2e-6 * scale)
