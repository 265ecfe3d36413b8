"""The parts of a module's BIR-JSON, rendered one by one (as workers do), join to the single write."""

from __future__ import annotations

import pytest

from tests.programs import tiled_exp_module
from tests.test_bir_json_columnar import MODULES, _unrolled
from tusk.ir import bir_json
from tusk.ir.bir_json import column_writer
from tusk.ir.module import Module


def _two_functions() -> Module:
    """A module of several functions (host and kernels), one of them unrolled with loops kept elsewhere."""
    a, b = _unrolled(tiled_exp_module(tiles=300)), tiled_exp_module(tiles=7, width=130)
    return Module(a.functions + b.functions, a.arch, a.version, a.attributes, a.artifact_dir, a.queues, a.extras)


@pytest.mark.parametrize("name", sorted(MODULES) + ["two-functions"])
@pytest.mark.parametrize("n", [1, 2, 3, 8, 50])
def test_joined_parts_are_the_single_write(name, n, monkeypatch):
    monkeypatch.setattr(column_writer, "CHUNK", 64)  # many chunks: the cuts fall inside runs and blocks
    m = _two_functions() if name == "two-functions" else MODULES[name]
    whole = bir_json.dumps(m).encode()
    parts = [bir_json.render_part(m, k, n) for k in range(n)]
    assert bir_json.join(parts) == whole
    assert bir_json.render_parts(m, n) == parts
    if n > 1 and m.n_insts() >= 64 * n:  # parts share the instructions
        assert max(len(p) for p in parts) < 0.9 * len(whole)


def test_part_numbers_are_checked():
    m = MODULES["nest"]
    for k, n in ((2, 2), (-1, 3), (0, 0)):
        with pytest.raises(ValueError):
            bir_json.render_part(m, k, n)
