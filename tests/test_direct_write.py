"""The writer's output path past the page cache (tusk.ir.direct_write): the same bytes whatever the
pieces, the file system's refusal, a write error and an interruption."""

from __future__ import annotations

import errno
import os
import random
import threading

import pytest

from tusk.ir import bir_json, direct_write
from tusk.ir.atomic import atomic_output
from tusk.ir.direct_write import CHUNK, DirectWriter
from tusk.ir.module import Module


def _pieces(total: int, seed: int) -> list[bytes | memoryview]:
    rng = random.Random(seed)
    out: list[bytes | memoryview] = []
    left = total
    while left:
        k = min(left, rng.choice([1, 7, 4095, 4096, 65536, CHUNK - 3, CHUNK, 2 * CHUNK + 5]))
        data = rng.randbytes(k)
        out.append(memoryview(data) if rng.random() < 0.3 else data)
        left -= k
    return out


def _write(path, pieces) -> None:
    with atomic_output(str(path)) as raw, DirectWriter(raw) as fh:
        for p in pieces:
            assert fh.write(p) == len(p)


@pytest.mark.parametrize("total", [0, 5, CHUNK - 1, CHUNK, CHUNK + 1, 3 * CHUNK + 4097, 7 * CHUNK + 11])
def test_the_file_holds_exactly_the_bytes_written(tmp_path, total):
    pieces = _pieces(total, total)
    _write(tmp_path / "out", pieces)
    assert (tmp_path / "out").read_bytes() == b"".join(bytes(p) for p in pieces)
    assert not [t for t in threading.enumerate() if t.name == "tusk-direct-write"]


def test_whole_chunks_go_past_the_page_cache_where_the_file_system_allows_it(tmp_path, monkeypatch):
    try:
        os.close(os.open(tmp_path / "probe", os.O_WRONLY | os.O_CREAT | direct_write.O_DIRECT))
    except (OSError, TypeError):
        pytest.skip("no O_DIRECT here")
    real, direct = direct_write._write, []

    def spy(fd, view):
        direct.append(bool(direct_write.fcntl.fcntl(fd, direct_write.fcntl.F_GETFL) & direct_write.O_DIRECT))
        return real(fd, view)

    monkeypatch.setattr(direct_write, "_write", spy)
    pieces = _pieces(3 * CHUNK + 5, 4)
    _write(tmp_path / "out", pieces)
    assert direct == [True, True, True, False]  # three whole chunks, then the rest
    assert (tmp_path / "out").read_bytes() == b"".join(bytes(p) for p in pieces)


def test_a_file_system_without_o_direct_gets_ordinary_writes(tmp_path, monkeypatch):
    real = direct_write.fcntl.fcntl

    def refuse(fd, cmd, arg=0):
        if cmd == direct_write.fcntl.F_SETFL and arg & direct_write.O_DIRECT:
            raise OSError(errno.EINVAL, "Invalid argument")
        return real(fd, cmd, arg)

    monkeypatch.setattr(direct_write.fcntl, "fcntl", refuse)
    pieces = _pieces(3 * CHUNK + 10, 1)
    _write(tmp_path / "out", pieces)
    assert (tmp_path / "out").read_bytes() == b"".join(bytes(p) for p in pieces)


def test_a_refused_direct_write_goes_through_the_page_cache(tmp_path, monkeypatch):
    """EINVAL from a direct write (an alignment the device wants and we do not meet): the rest of the
    file, that chunk included, is written the ordinary way."""
    real = direct_write._write

    def picky(fd, view):
        if direct_write.fcntl.fcntl(fd, direct_write.fcntl.F_GETFL) & direct_write.O_DIRECT:
            raise OSError(errno.EINVAL, "Invalid argument")
        return real(fd, view)

    monkeypatch.setattr(direct_write, "_write", picky)
    pieces = _pieces(4 * CHUNK + 3, 2)
    _write(tmp_path / "out", pieces)
    assert (tmp_path / "out").read_bytes() == b"".join(bytes(p) for p in pieces)


def test_a_failed_chunk_is_raised_and_the_old_file_stays(tmp_path, monkeypatch):
    target = tmp_path / "out"
    target.write_bytes(b"old")

    def full(fd, view):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(direct_write, "_write", full)
    with pytest.raises(OSError) as e:
        _write(target, _pieces(6 * CHUNK, 3))
    assert e.value.errno == errno.ENOSPC
    assert target.read_bytes() == b"old" and os.listdir(tmp_path) == ["out"]


def test_an_exception_while_rendering_waits_for_the_chunks_in_flight_and_leaves_nothing(tmp_path):
    target = tmp_path / "out"
    with pytest.raises(KeyboardInterrupt):
        with atomic_output(str(target)) as raw, DirectWriter(raw) as fh:
            fh.write(b"x" * (3 * CHUNK))
            raise KeyboardInterrupt
    assert os.listdir(tmp_path) == []
    assert not [t for t in threading.enumerate() if t.name == "tusk-direct-write"]


def test_save_writes_the_same_bytes_as_dumps(tmp_path):
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parents[1] / "bench"))
    from nests import tusk_nest

    from tusk.stages.unroll import unroll_function

    m = tusk_nest(8, 8, 120)  # ~31k instructions unrolled, ~14 MB: a few chunks
    fn, _ = unroll_function(m.functions[0])
    out = Module([fn], m.arch, m.version, m.attributes)
    bir_json.save(out, tmp_path / "u.json")
    data = (tmp_path / "u.json").read_bytes()
    assert len(data) > 2 * CHUNK
    assert data == bir_json.dumps(out).encode()


# ----------------------------------------------------------------------------- reading past the page cache


def _read_all(path, step: int) -> bytes:
    out, buf = bytearray(), bytearray(step)
    with direct_write.DirectReader(str(path)) as fh:
        while n := fh.readinto(buf):
            out += buf[:n]
    return bytes(out)


@pytest.mark.parametrize("total", [0, 1, 4095, 4096, CHUNK - 1, CHUNK, CHUNK + 1, 3 * CHUNK + 4097])
def test_the_direct_reader_reads_exactly_the_file(tmp_path, total):
    data = random.Random(total).randbytes(total)
    (tmp_path / "f").write_bytes(data)
    for step in (7, 1 << 21, 2 * CHUNK + 1):
        assert _read_all(tmp_path / "f", step) == data


def test_a_file_system_that_refuses_direct_reads_is_read_as_usual(tmp_path, monkeypatch):
    """EINVAL from the open with O_DIRECT, or from the first direct read: the file is read the ordinary way."""
    data = random.Random(3).randbytes(2 * CHUNK + 9)
    (tmp_path / "f").write_bytes(data)
    real_open, real_preadv = os.open, os.preadv

    def no_direct_open(path, flags, *rest):
        if flags & direct_write.O_DIRECT:
            raise OSError(errno.EINVAL, "Invalid argument")
        return real_open(path, flags, *rest)

    monkeypatch.setattr(direct_write.os, "open", no_direct_open)
    assert _read_all(tmp_path / "f", 1 << 20) == data
    monkeypatch.setattr(direct_write.os, "open", real_open)
    refused: list[int] = []

    def picky(fd, buffers, offset):
        if direct_write.fcntl.fcntl(fd, direct_write.fcntl.F_GETFL) & direct_write.O_DIRECT:
            refused.append(offset)
            raise OSError(errno.EINVAL, "Invalid argument")
        return real_preadv(fd, buffers, offset)

    monkeypatch.setattr(direct_write.os, "preadv", picky)
    assert _read_all(tmp_path / "f", 1 << 20) == data
    if direct_write.O_DIRECT:
        assert refused == [0]


def test_a_read_error_reaches_the_reader_and_closing_early_ends_the_helper(tmp_path, monkeypatch):
    (tmp_path / "f").write_bytes(random.Random(5).randbytes(4 * CHUNK))
    with direct_write.DirectReader(str(tmp_path / "f")) as fh:   # closed after one read: no thread is left
        assert fh.readinto(bytearray(10)) == 10
    assert not fh.worker.is_alive()
    real = os.preadv

    def fail_later(fd, buffers, offset):
        if offset >= 2 * CHUNK:
            raise OSError(errno.EIO, "Input/output error")
        return real(fd, buffers, offset)

    monkeypatch.setattr(direct_write.os, "preadv", fail_later)
    with pytest.raises(OSError, match="Input/output error"):
        _read_all(tmp_path / "f", 1 << 20)
