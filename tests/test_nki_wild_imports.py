"""What public kernel files outside the tested repositories do at their top level, besides the kernel: the
names their Neuron SDK environment gives them while a kernel is traced, and nothing of it afterwards."""

from __future__ import annotations

import logging

import numpy as np

from tests.test_frontend_entry import write
from tusk.frontend import trace_file
from tusk.frontend.check import run_klr
from tusk.frontend.nki import language as tusk_language

HEADER = """\
import logging
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl
import neuronxcc.nki.language.constants as constants
"""

X = np.random.default_rng(11).standard_normal((128, 64)).astype(np.float32)


def test_logging_off_and_the_language_constants_submodule_while_a_kernel_is_traced(tmp_path):
    # a course kernel silences the compiler's logging with the level the Neuron SDK adds, and a library
    # kernel sizes its tiles with constants.sizeinbytes through `import ... .constants as constants`
    path = write(tmp_path, """
        logging.disable(logging.OFF)
        WIDTH = 256 // constants.sizeinbytes(nl.float32)

        @nki.jit
        def scaled(a):
            out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
            t = nl.load(a[:, 0:WIDTH])
            nl.store(out[:, 0:WIDTH], value=nl.multiply(t, 2.0))
            return out
    """, header=HEADER)
    logging.disable(logging.NOTSET)
    try:
        got = run_klr(trace_file(path, "scaled", ["f32[128,64]"]), {"a": X})["out"]
    finally:
        logging.disable(logging.NOTSET)  # the kernel's own call is its business, not the next test's
    assert np.array_equal(got, 2 * X)
    assert not hasattr(logging, "OFF")
    assert "constants" not in vars(tusk_language)


def test_a_probe_for_a_missing_module_finds_nothing_while_an_import_of_it_gets_a_stand_in(tmp_path):
    # nkilib's __init__ asks importlib.util.find_spec whether its source package is installed: a stand-in
    # answering the probe made it replace itself with one
    path = write(tmp_path, """
        import importlib.util
        import surely_not_installed_abc as absent

        PROBED = importlib.util.find_spec("surely_not_installed_xyz") is not None

        @nki.jit
        def k(x):
            assert not PROBED
            out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
            nl.store(out, value=nl.load(x))
            return out
    """, header=HEADER)
    assert np.array_equal(run_klr(trace_file(path, "k", ["f32[128,64]"]), {"x": X})["out"], X)
