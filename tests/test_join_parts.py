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


def test_the_first_part_becomes_the_file_and_only_the_others_are_copied(tmp_path, monkeypatch):
    copied = []
    real = os.copy_file_range

    def counting(src, dst, count, *args):
        n = real(src, dst, count, *args)
        copied.append(n)
        return n

    monkeypatch.setattr(os, "copy_file_range", counting)
    data = [os.urandom(2_000_000), os.urandom(1_000_003)]
    parts = []
    for k, b in enumerate(data):
        (tmp_path / f"x.part{k}").write_bytes(b)
        parts.append(str(tmp_path / f"x.part{k}"))
    first = os.stat(parts[0]).st_ino
    out = tmp_path / "x.bir.json"
    assert tasks.join_parts(parts, str(out)) == 3_000_003
    assert out.read_bytes() == b"".join(data) and os.stat(out).st_ino == first
    assert sum(copied) == len(data[1])  # in the kernel, and the second part's bytes alone


def test_a_failed_join_leaves_the_file_as_it_was(tmp_path):
    out = tmp_path / "x.bir.json"
    out.write_bytes(b"old")
    first = tmp_path / "x.part0"
    first.write_bytes(b"new")
    with pytest.raises(OSError):
        tasks.join_parts([str(first), str(tmp_path / "missing.part1")], str(out))
    assert out.read_bytes() == b"old" and not first.exists()
