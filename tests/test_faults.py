"""A small sample of the fault suite (tests/fault_suite.py); ``python bench/faults.py`` runs all of it."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from tests import fault_suite as fs

SMALL = ("tiled_exp.json",)
needs_strace = pytest.mark.skipif(fs.shutil.which("strace") is None, reason="strace is not installed")


@pytest.fixture(scope="module")
def box():
    b = fs.Sandbox()
    yield b
    b.close()


def _clean(c: fs.Counts) -> None:
    assert c.bad() == 0, "\n".join(c.bad_inputs + c.stray_writes + c.notes)


def _item_1() -> tuple[str, bytes]:
    """Issue 22 item 1: a BIR-JSON location set whose tensor_shape [2**40, 2**40] overflows int64 only as a product."""
    for name, data in fs.bir_product_mutations(("shape_2p40x2p40",), SMALL):
        return name, data
    raise AssertionError("the multi-value generator does not make item 1")


def test_the_multi_value_generator_makes_item_1_and_kinds_single_changes_cannot():
    name, data = _item_1()
    assert json.loads(data)["functions"][0]["allocations"][0]["tensor_shape"] == [2**40, 2**40]
    tags = {n.removeprefix("tiled_matmul_").removesuffix(".json") for n, _ in
            fs.bir_product_mutations(kernels=("tiled_matmul.json",))}
    assert {"sum_of_sizes", "zero_dims", "overlapping_locations", "loop_trip_product"} <= tags
    assert fs.klr_product_mutations(), "no KLR kernel with a product shape could be written"


def test_every_file_built_alone_gets_its_own_verdict_and_a_hang_names_its_file(box):
    item1 = _item_1()
    plain = ("plain.json", (fs.EXAMPLES / "tiled_exp.json").read_bytes())
    c = fs.hostile(box, [item1, plain], "alone", group=1)
    assert c.verdicts == {"clean refusal": 1, "accepted": 1} and c.builds == 2, c.bad_inputs
    fs.hostile_alone(box, c, "slow.json", plain[1], "alone", timeout=0.05)  # answers, but not in 50 ms
    assert c.verdicts["hang"] == 1 and c.bad_inputs[-1].startswith("slow.json: hang")


def test_a_group_gives_one_verdict_per_file_from_one_build(box):
    good = (fs.EXAMPLES / "tiled_exp.json").read_bytes()
    files = [_item_1(), ("cut.json", good[:700]), ("notbir.json", b'{"x": 1}'), ("also_good.json", good)]
    c = fs.hostile(box, files, "group", group=8)
    assert c.builds == 1, c.notes  # nothing needed a second build
    assert c.verdicts == {"clean refusal": 2, "skipped": 1, "accepted": 1}, c.bad_inputs
    _clean(c)


def test_the_strace_log_reader_finds_writes_only():
    cwd = Path("/w")
    lines = {
        'openat(AT_FDCWD</w>, "x", O_RDONLY|O_CLOEXEC) = 3</w/x>': [],
        'openat(AT_FDCWD</w>, "y", O_WRONLY|O_CREAT|O_TRUNC, 0666) = 3</w/y>': ["/w/y"],
        'openat(AT_FDCWD</w>, "/etc/z", O_RDWR) = -1 EACCES (Permission denied)': [],
        'mkdir("rel", 0777)                        = 0': ["/w/rel"],
        'renameat2(AT_FDCWD</w>, "a", 3</w/d>, "b", RENAME_NOREPLACE) = 0': ["/w/a", "/w/d/b"],
        'unlink("/tmp/gone")                       = 0': ["/tmp/gone"],
    }
    for line, want in lines.items():
        assert fs._written_paths(line, cwd) == want, line


@needs_strace
def test_a_write_anywhere_outside_out_and_cache_is_reported(box):
    c = fs.Counts()
    ok = box.root / "ok"
    ok.mkdir()
    leak = box.root.parent / f"{box.root.name}-leak"
    r = fs.run(box, ["sh", "-c", f'echo a > "{ok}/fine"; echo b > "{leak}"; mkdir made; '
                                 'python3 -c "import multiprocessing as m; m.Lock()"'], [ok], 30, c)
    leak.unlink()
    assert r.returncode == 0 and c.watched == 1
    assert [s.split()[0] for s in c.stray_writes] == sorted([str(leak), str(box.root / "cwd" / "made")])
    assert c.semaphores >= 1  # the Lock's semaphore: made and removed, counted apart


def test_a_full_disk_fails_cleanly_and_the_same_cache_recovers(box):
    if not fs.can_mount_tmpfs():
        pytest.skip("no mount namespace here")
    c = fs.full_disk(box, (0.5,), SMALL)
    _clean(c)
    assert c.disks_filled >= 1 and c.disks_recovered == c.disks_filled, c.notes
    assert any("ran out of room" in n and "first build exit 2" in n and "same cache exit 0" in n
               for n in c.notes), c.notes


def test_killed_builds_rebuild_to_the_clean_result(box):
    c = fs.kill_rounds(box, random.Random(4), 1, "2", SMALL)
    _clean(c)
    # the first build was killed while it ran; its rebuild too, unless the killed build had put every output
    # in place and the rebuild had nothing left to do (too quick to interrupt: noted, not counted)
    assert c.interrupted >= 1 and c.builds >= 3, "\n".join(c.notes)


def test_two_builds_at_once_on_one_cache_and_one_output(box):
    _clean(fs.concurrent_builds(box, SMALL))


def test_the_defects_the_full_suite_found_are_clean_refusals(box):
    # each was a traceback of the whole command (KLR shapes whose bytes pass int64, in the host module),
    # an 'environment' failure with exit 2 (an OverflowError in the verifier: access-pattern extents and
    # symbolic offsets past int64) or an internal error (a KLR SB address near 2^63 wrapped in build_fdeps)
    files = fs.bir_product_mutations(("ap_extent_2p80", "coeff_wraps"), SMALL)
    files += [f for f in fs.klr_product_mutations() if "shape_2p" in f[0] or "addr_wraps" in f[0]]
    assert len(files) == 5
    c = fs.hostile(box, files, "defects", group=8)
    assert c.verdicts == {"clean refusal": 5} and c.builds == 1, c.bad_inputs + c.notes
