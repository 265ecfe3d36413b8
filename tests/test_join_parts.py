"""The parts of a BIR-JSON file rendered by several workers are joined byte for byte (in the kernel where it can)."""

from __future__ import annotations

import os

import pytest

from tusk.workflows import tasks


@pytest.mark.parametrize("kernel_copy", [True, False])
def test_parts_join_into_the_whole_and_are_removed(tmp_path, monkeypatch, kernel_copy):
    if not kernel_copy:
        monkeypatch.delattr(os, "copy_file_range", raising=False)
    data = [os.urandom(n) for n in (0, 1, 3_000_001, 17)]
    parts = []
    for k, b in enumerate(data):
        p = tmp_path / f"x.part{k}"
        p.write_bytes(b)
        parts.append(str(p))
    out = tmp_path / "x.bir.json"
    assert tasks.join_parts(parts, str(out)) == sum(map(len, data))
    assert out.read_bytes() == b"".join(data) and not any(os.path.exists(p) for p in parts)
