"""The parts of a big BIR-JSON file rendered by several workers land at their offsets in one file, and the file
equals the whole write byte for byte."""

from __future__ import annotations

import os

import pytest

from tusk.ir import direct_write
from tusk.workflows import write_tasks


@pytest.mark.parametrize("direct", [True, False])
def test_disjoint_ranges_written_at_their_offsets_make_the_file(tmp_path, monkeypatch, direct):
    if not direct:
        monkeypatch.setattr(direct_write, "O_DIRECT", 0)
    chunk = direct_write.CHUNK
    # offsets off and on the 4 KiB grid, a part below one page, one of several whole chunks, an empty one
    data = [os.urandom(n) for n in (4095, 1, 0, 2 * chunk + 4097, 17, 3 * 4096)]
    path = tmp_path / "x.bir.json"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT)
    try:
        for k, b in reversed(list(enumerate(data))):  # written in any order
            # a part comes as the writer's pieces: split this one in three
            pieces = [b[:len(b) // 3], memoryview(b)[len(b) // 3:len(b) // 2], bytearray(b[len(b) // 2:])]
            assert direct_write.write_at(fd, sum(len(d) for d in data[:k]), pieces) == len(b)
    finally:
        os.close(fd)
    assert path.read_bytes() == b"".join(data) and os.path.getsize(path) == sum(map(len, data))


@pytest.mark.parametrize("gone", [False, True])
def test_parts_placed_from_their_files_make_the_whole_write(tmp_path, gone):
    """Each later part waits in a file of its own until it is placed; a place task that finds that file gone
    renders its part itself."""
    from tusk.cache import Store
    from tusk.examples import bir_kernels
    from tusk.ir import bir_json

    module = bir_kernels.tiled_exp(tiles=12)[0]
    store = Store(tmp_path / "store")
    h = store.put(module)
    path = str(tmp_path / "k.bir.json")
    art = str(tmp_path / "art")
    n = 3
    rendered = [write_tasks.write_part(store.url, h, path, art, k, n) for k in range(n)]
    assert [r["status"] for r in rendered] == ["part-rendered"] * n
    waiting = [write_tasks.part_file(path, n, k) for k in (1, 2)]
    assert [os.path.getsize(f) for f in waiting] == [r["size"] for r in rendered[1:]]
    if gone:
        for f in waiting:
            os.unlink(f)
    offset = rendered[0]["size"]
    for k in (2, 1):
        at = offset + sum(r["size"] for r in rendered[1:k])
        res = write_tasks.place_part(store.url, h, path, art, k, n, at)
        assert res["status"] == "part-placed" and ("rendered_again" in res["timing"]) == gone
    size = write_tasks.finish_parts(path, n, sum(r["size"] for r in rendered))
    whole = tmp_path / "whole.bir.json"
    from tusk.ir.module import Module

    bir_json.save(Module(module.functions, module.arch, module.version, module.attributes, art, module.queues,
                         module.extras), whole)
    assert open(path, "rb").read() == whole.read_bytes() and size == os.path.getsize(whole)
    assert not os.path.exists(write_tasks.parts_file(path, n)) and not any(map(os.path.exists, waiting))


def test_a_short_file_is_not_put_in_place(tmp_path):
    out = tmp_path / "x.bir.json"
    out.write_bytes(b"old")
    tmp = write_tasks.parts_file(str(out), 2)
    with open(tmp, "wb") as fh:
        fh.write(b"new")
    with pytest.raises(OSError):
        write_tasks.finish_parts(str(out), 2, 10)
    assert out.read_bytes() == b"old" and not os.path.exists(tmp)
