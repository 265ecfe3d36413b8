"""The columnar BIR-JSON paths build exactly what the ordinary ones do.

The writer's templates must write the same JSON values as rendering every
instruction one by one; the loader's column-wise reading must build the same
module as the ordinary reader, and hand anything it does not cover back to it.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.programs import every_family_module, tiled_exp_module
from tusk.examples.generate import KERNELS
from tusk.ir import bir_json
from tusk.ir.bir_json import column_reader, column_writer, digits, writer
from tusk.ir.builder import Builder
from tusk.ir.errors import FormatError
from tusk.ir.module import Module
from tusk.stages.build_fdeps import BuildFDeps
from tusk.stages.full_unroll import FullUnroll
from tusk.stages.unroll import unroll_function

sys.path.insert(0, str(Path(__file__).parent.parent / "bench"))
from nests import tusk_nest  # noqa: E402

EVIDENCE = Path(__file__).parent / "data" / "bir_json_evidence"


def _unrolled(m: Module, deps: bool = True) -> Module:
    out = Module([unroll_function(f)[0] for f in m.functions], m.arch, m.version, m.attributes, m.artifact_dir,
                 m.queues, m.extras)
    return BuildFDeps().run(out)[0] if deps else out


def _modules():
    yield "nest", _unrolled(tusk_nest(3, 4, 5))
    yield "nest-no-deps", _unrolled(tusk_nest(4, 3, 9), deps=False)
    yield "family", _unrolled(every_family_module())
    yield "tiled", _unrolled(tiled_exp_module(tiles=40))
    for name in ("tiled_matmul", "block_tensor", "predicated_accumulate", "tiled_softmax"):
        yield name, FullUnroll(level=1).run(bir_json.load(KERNELS / f"{name}.json"))[0]
    m = bir_json.load(EVIDENCE / "k_loop_record.json")
    yield "k-loop", FullUnroll(level=1).run(m)[0]
    yield "negative", _negative_offsets()
    yield "names", _awkward_names()
    yield "rotated", _rotated_names()


def _rotated_names() -> Module:
    """large_matmul's program with its buffers rotated: copies named "ta_rot1", "ta_rot2", ..."""
    from tests.test_split_large import large_matmul_like
    from tusk import stages
    from tusk.ir.enums import FnAttr

    m = large_matmul_like()
    for fn in m.functions:
        fn.attrs.add(FnAttr.ROTATE_PSUM_AND_SB)
    m = _unrolled(m)
    for name in ("address_rotation_psum", "address_rotation_sb"):
        m = stages.make_pass(name).run(m)[0]
    return m


def _negative_offsets() -> Module:
    m = _unrolled(tusk_nest(2, 2, 12))
    fn = m.functions[0]
    off = fn.operands["offset"]
    off[::3] = -off[::3] - 7  # not a program any more, but every spelling of a number
    off[1::5] = 10**15 + np.arange(len(off[1::5]))
    return m


def _awkward_names() -> Module:
    b = Builder("k")
    t = b.sbuf("t", (128, 4), addr=0)
    y = b.dram("y", (128, 64), kind="ExternalOutput")
    with b.loop("i", 0, 14) as i:
        b.dma(y.tile(0, 128, i * 4, 4), t.ap(), name="x1-it07")     # not a clone name: leading zero
        b.dma(y.tile(0, 128, i * 4, 4), t.ap(), name="v2.3")
        b.dma(y.tile(0, 128, i * 4, 4), t.ap(), name="é-it")
    m = _unrolled(b.module())
    fn = m.functions[0]
    fn.insts["iter"][::7] += 1_000_000_000 - 1  # a ten-digit clone iteration
    return m


MODULES = dict(_modules())


@pytest.mark.parametrize("name", sorted(MODULES))
def test_templates_write_what_one_by_one_rendering_writes(name, monkeypatch):
    m = MODULES[name]
    fast = bir_json.dumps(m)
    monkeypatch.setattr(column_writer, "MIN_GROUP", 10**9)
    slow = bir_json.dumps(m)
    assert json.loads(fast) == json.loads(slow)
    assert fast.count("\n") == slow.count("\n")


@pytest.mark.parametrize("name", sorted(MODULES))
def test_columnar_loading_builds_what_the_reader_builds(tmp_path, name):
    path = tmp_path / "m.json"
    bir_json.save(MODULES[name], path)
    ordinary = bir_json.load(path, fast=False)
    try:
        columnar = column_reader.ColumnLoad(str(path)).load()
    except column_reader.Fallback:
        pytest.skip("no run of one-line instructions to read column-wise")
    assert columnar == ordinary
    assert bir_json.dumps(columnar) == bir_json.dumps(ordinary)


@pytest.mark.parametrize("samples, extra, one_hash", [(2, 1, False), (2, 16, False), (16, 16, True)])
def test_lines_a_guess_does_not_tell_apart_are_read_as_they_are(tmp_path, monkeypatch, samples, extra, one_hash):
    """Families are guessed from a sample of a line's masked text and sub-templates by a hash of their
    constant runs; a wrong guess (families one byte apart, a sample too small to see it; every
    sub-template hashed alike) must still build what the ordinary reader builds."""
    m = _unrolled(tusk_nest(3, 4, 30))
    path = tmp_path / "m.json"
    bir_json.save(m, path)
    lines = path.read_text().split("\n")
    flipped = 0
    for k in range(0, len(lines), 3):   # the same length, one word apart
        if '"Flow"]' in lines[k]:
            lines[k] = lines[k].replace('"Flow"]', '"Anti"]', 1)
            flipped += 1
    assert flipped > 50
    path.write_text("\n".join(lines))
    monkeypatch.setattr(column_reader, "READ_BYTES", 4096)   # many windows: guesses from the ones before
    monkeypatch.setattr(column_reader._FamilyGuess, "SAMPLES", samples)
    monkeypatch.setattr(column_reader._FamilyGuess, "EXTRA", extra)
    if one_hash:
        monkeypatch.setattr(column_reader, "_key_hash", lambda fk, K: np.zeros(len(fk), dtype=np.uint64))
    load = column_reader.ColumnLoad(str(path))
    assert load.load() == bir_json.load(path, fast=False)
    assert len(load.fams) > 2


def _rotated_file(tmp_path) -> tuple[Path, list[str]]:
    path = tmp_path / "rotated.json"
    bir_json.save(MODULES["rotated"], path)
    return path, path.read_text().split("\n")


def test_memory_names_that_differ_in_digits_are_slots(tmp_path, monkeypatch):
    """Lines alike but for the digits of their memory names ("ta_rot1" / "ta_rot2") share a sub-template: the
    names are slots, each line's operand read with its own name."""
    path, _ = _rotated_file(tmp_path)
    ordinary = bir_json.load(path, fast=False)
    load = column_reader.ColumnLoad(str(path))
    assert load.load() == ordinary
    monkeypatch.setattr(column_reader, "MEM_DIGITS", 0)   # names as constants, as before
    constants = column_reader.ColumnLoad(str(path))
    assert constants.load() == ordinary
    assert len(load.sub_lines) < len(constants.sub_lines) / 2, (len(load.sub_lines), len(constants.sub_lines))


@pytest.mark.parametrize("edit", ["setref", "leading zero", "unknown"])
def test_a_memory_name_slot_reads_each_name_as_the_reader_does(tmp_path, edit):
    """A line whose names are not its prototype's in any way the reader cares about: a memsetref that is
    not its memref's set (kept as it was written), a name with a leading zero (another memory location, or
    none), a name that does not exist (the reader's error, naming it)."""
    path, lines = _rotated_file(tmp_path)
    rows = [k for k, line in enumerate(lines) if '"memref":"ta_rot2","memsetref":"ta_rot2_set"' in line]
    assert len(rows) > 3
    k = rows[len(rows) // 2]
    if edit == "setref":
        lines[k] = lines[k].replace('"memsetref":"ta_rot2_set"', '"memsetref":"ta_rot3_set"', 1)
    elif edit == "leading zero":
        lines[k] = lines[k].replace('"memref":"ta_rot2"', '"memref":"ta_rot02"', 1)
    else:
        lines[k] = lines[k].replace('"memref":"ta_rot2"', '"memref":"ta_rot9"', 1)
    path.write_text("\n".join(lines))
    if edit != "setref":
        name = "ta_rot9" if edit == "unknown" else "ta_rot02"
        with pytest.raises(FormatError) as err:
            bir_json.load(path)
        assert f"memory location '{name}' does not exist" in str(err.value) and str(path) in str(err.value)
        assert ".instructions[" in (err.value.where or "")
        return
    ordinary = bir_json.load(path, fast=False)
    assert column_reader.ColumnLoad(str(path)).load() == ordinary
    assert bir_json.dumps(ordinary).count('"memsetref":"ta_rot3_set"') > bir_json.dumps(MODULES["rotated"]).count(
        '"memsetref":"ta_rot3_set"')


def _declared_in(name: str, order: str) -> Module:
    b = Builder(name)
    make = {"t": lambda: b.sbuf("t", (128, 4), addr=0), "u": lambda: b.sbuf("u", (128, 4), addr=512),
            "y": lambda: b.dram("y", (128, 400), kind="ExternalOutput")}
    got = {k: make[k]() for k in order}
    with b.loop("i", 0, 100) as i:
        b.dma(got["y"].tile(0, 128, i * 4, 4), got["t"].ap(), name="a")
        b.dma(got["y"].tile(0, 128, i * 4, 4), got["u"].ap(), name="b")
    return _unrolled(b.module(), deps=False)


def test_functions_with_the_same_lines_each_read_their_own_memory_locations(tmp_path):
    """Two functions whose instruction lines are the same text but whose pools are not (memory locations
    declared in another order): a line's prototype from the first function must not stand for the second's
    (it did: the second function's rows pointed into the first's pools)."""
    first, second = _declared_in("k1", "tuy"), _declared_in("k2", "yut")
    m = Module([first.functions[0], second.functions[0]], first.arch, first.version, first.attributes)
    path = tmp_path / "two.json"
    bir_json.save(m, path)
    load = column_reader.ColumnLoad(str(path))
    assert load.load() == m == bir_json.load(path, fast=False)
    bir_json.save(first, tmp_path / "one.json")
    alone = column_reader.ColumnLoad(str(tmp_path / "one.json"))
    alone.load()
    assert load.sub_lines == alone.sub_lines   # the second function's lines are the first's sub-templates


def test_large_file_takes_the_columnar_path_and_gzip(tmp_path, monkeypatch):
    m = _unrolled(tusk_nest(6, 6, 40))
    for suffix in (".json", ".json.gz"):
        path = tmp_path / f"big{suffix}"
        bir_json.save(m, path)
        calls = []
        real = column_reader.ColumnLoad.load
        monkeypatch.setattr(column_reader.ColumnLoad, "load", lambda self: calls.append(1) or real(self))
        monkeypatch.setattr(column_reader, "MIN_FAST_BYTES", 1)
        assert bir_json.load(path) == m
        assert calls, "the columnar path was not taken"
    calls.clear()
    assert bir_json.loads(bir_json.dumps(m)) == m  # text in memory takes it too
    assert calls


def test_a_bad_line_among_good_ones_is_reported_by_the_ordinary_reader(tmp_path, monkeypatch):
    m = _unrolled(tusk_nest(3, 3, 20), deps=False)
    path = tmp_path / "bad.json"
    bir_json.save(m, path)
    lines = path.read_text().split("\n")
    k = len(lines) // 2
    assert lines[k].startswith('{"engine"')
    lines[k] = lines[k].replace('"name":"', '"name":"zz', 1).replace('"offset":', '"offset":0', 1)
    path.write_text("\n".join(lines))
    monkeypatch.setattr(column_reader, "MIN_FAST_BYTES", 1)
    with pytest.raises(FormatError) as err:
        bir_json.load(path)
    assert str(path) in str(err.value) and "malformed JSON" in str(err.value)


def test_unknown_dependency_in_a_run_is_an_error_with_its_path(tmp_path, monkeypatch):
    m = _unrolled(tusk_nest(3, 3, 20))
    path = tmp_path / "dangling.json"
    bir_json.save(m, path)
    text = path.read_text().replace('["load_a-it17","Flow"]', '["load_a-it99999","Flow"]', 1)
    path.write_text(text)
    monkeypatch.setattr(column_reader, "MIN_FAST_BYTES", 1)
    with pytest.raises(FormatError) as err:
        bir_json.load(path)
    assert "Unknown dependency 'load_a-it99999'" in str(err.value)
    assert ".instructions[" in (err.value.where or "")


def test_writer_memory_does_not_follow_the_instruction_count(monkeypatch):
    """The writer works chunk by chunk: its temporaries are bounded by the chunk, not the function."""
    import tracemalloc

    monkeypatch.setattr(column_writer, "CHUNK", 512)
    monkeypatch.setattr(writer, "SINK_BYTES", 1 << 16)
    peaks = []
    for kt in (40, 160):
        m = _unrolled(tusk_nest(4, 4, kt), deps=False)
        tracemalloc.start()
        bir_json.write(m, _Null())
        peaks.append(tracemalloc.get_traced_memory()[1])
        tracemalloc.stop()
    assert peaks[1] < 1.3 * peaks[0], peaks


class _Null:
    def write(self, b) -> int:
        return len(b)


@pytest.mark.parametrize("seed", range(6))
def test_templates_follow_any_attribute_values(seed, monkeypatch):
    """Attribute records that differ in integers share templates; anything else keeps them apart."""
    from tusk.ir.columns import Record

    rng = np.random.default_rng(seed)
    m = _unrolled(tusk_nest(3, 3, 12))
    fn = m.functions[0]
    junk = [0, 7, -5, 2**62 + 1, 2**63, 2**64 - 1, 1.5, float("inf"), "x", True, [1, 2], {"a": 3}, {"a": [4, 5]}]
    rows = rng.choice(len(fn.insts), size=len(fn.insts) // 3, replace=False)
    for r in rows.tolist():
        rec = dict(fn.record(int(fn.insts["attrs"][r])))
        rec[str(rng.choice(["accumulation_flag", "k", "tile_size"]))] = junk[int(rng.integers(len(junk)))]
        fn.insts["attrs"][r] = fn.intern_record(Record.of(rec))
    fast = bir_json.dumps(m)
    monkeypatch.setattr(column_writer, "MIN_GROUP", 10**9)
    assert json.loads(fast) == json.loads(bir_json.dumps(m))


def test_digit_counts_at_every_power_of_ten():
    v = np.array([0] + [s * (10**k + d) for k in range(19) for d in (-1, 0, 1) for s in (1, -1)
                        if 0 < 10**k + d < 2**63], dtype=np.int64)
    assert digits.ndigits(v).tolist() == [len(str(x)) for x in v.tolist()]


def test_digit_run_values_at_every_length_and_place():
    """The loader's eight-digits-at-a-time values equal int() of each run: runs of 1 to 18 digits, after any
    byte (a space or a quote below '0' borrows in a plain subtraction), and one at the buffer's first byte."""
    rng = np.random.default_rng(7)
    text, ends, lengths, want = bytearray(), [], [], []
    for k in range(3000):
        if k:
            text += bytes(rng.choice(list(b' ",-:[x{}\x00\xff'), int(rng.integers(1, 6))))
        n = k % 18 + 1
        run = "".join(str(d) for d in rng.integers(0, 10, n))
        text += run.encode()
        ends.append(len(text))
        lengths.append(n)
        want.append(int(run))
    buf = np.frombuffer(bytes(text), dtype=np.uint8)
    got = digits.run_values(buf, np.array(ends), np.array(lengths))
    assert got.tolist() == want
    assert digits.run_values(buf[:4], np.array([1]), np.array([1])).tolist() == [int(chr(text[0]))]


def test_numbers_written_into_blank_fields_right_aligned():
    """The writer's digits go from the units up into fields that are blanks already: any width at least the
    number's, negatives and zero, 32- and 64-bit values; the bytes between fields are left alone."""
    rng = np.random.default_rng(11)
    v = np.concatenate([rng.integers(-10**12, 10**12, 500), rng.integers(-999, 1000, 500), [0, -1, 2**40, -(2**40)]])
    w = np.array([len(str(x)) + k % 3 for k, x in enumerate(v.tolist())])
    end = np.cumsum(w + 2) - 1
    buf = np.frombuffer(b"".join(b", " + b" " * n for n in w.tolist()), dtype=np.uint8).copy()
    digits.write_numbers(buf, end, w, v)
    assert buf.tobytes() == b"".join(b", " + str(x).rjust(n).encode() for x, n in zip(v.tolist(), w.tolist()))


def test_numbers_written_eight_digits_at_a_time_keep_their_neighbours():
    """Fields far enough apart take the one-word path (numbers 0 to 99,999,999), the rest digit by digit:
    every digit count and boundary, separators of 1 to 12 bytes (so fields near and far from each other),
    widths wider than the number; the bytes around each field stay as they were."""
    rng = np.random.default_rng(5)
    edges = [0, 1, 9, 10, 99, 100, 9999, 10000, 99_999_999, 100_000_000, 10**12, -1, -99_999_999]
    v = np.concatenate([edges, rng.integers(0, 10**8, 2000), 10 ** rng.integers(0, 8, 500) - rng.integers(0, 2, 500),
                        rng.integers(-10**9, 10**9, 200)]).astype(np.int64)
    w = np.array([len(str(x)) + k % 4 for k, x in enumerate(v.tolist())])
    seps = [bytes(rng.choice(list(b'x",:{}'), int(rng.integers(1, 13)))) for _ in range(len(v))]
    text = b"".join(s + b" " * n for s, n in zip(seps, w.tolist()))
    end = np.cumsum([len(s) + n for s, n in zip(seps, w.tolist())]) - 1
    buf = np.frombuffer(text, dtype=np.uint8).copy()
    digits.write_numbers(buf, end, w, v)
    assert buf.tobytes() == b"".join(s + str(x).rjust(n).encode() for s, x, n in zip(seps, v.tolist(), w.tolist()))


_JSON_LEAVES = (st.none() | st.booleans() | st.integers(-2**63, 2**64 - 1)
                | st.floats(allow_nan=False, allow_infinity=False) | st.text("ab7_é0-", max_size=8))
_JSON = st.recursive(_JSON_LEAVES, lambda inner: st.lists(inner, max_size=3)
                     | st.dictionaries(st.text("k9_", max_size=4), inner, max_size=3), max_leaves=12)


@settings(max_examples=300, deadline=None)
@given(obj=st.dictionaries(st.text("k9_", max_size=4), _JSON, max_size=5), blanks=st.booleans())
def test_a_parsed_line_has_the_digit_runs_its_text_has(obj, blanks):
    """A family's first line is walked as parsed when its tokens are orjson's compact form's (blanks apart):
    the walk must find the runs tokenising finds, in order, with the same paths and kinds."""
    import orjson

    line = orjson.dumps(obj)
    if blanks:  # as Tusk's writer pads numbers: blanks between tokens, never inside strings
        line = line.replace(b'":', b'": ').replace(b",", b" ,")
    parsed = orjson.loads(line)
    if orjson.dumps(parsed) != column_reader._squeezed(line):
        return  # a string with a comma or '":' in it: the blanks went inside it, and the walk is not used
    assert column_reader._runs_of(parsed) == column_reader._runs_with_paths(line)


def test_every_line_of_the_test_files_walks_as_it_tokenises(tmp_path):
    import orjson

    walked = 0
    for name, m in MODULES.items():
        for line in bir_json.dumps(m).split("\n"):
            line = line.rstrip(",")
            if not (line.startswith('{"') and line.endswith("}")):
                continue
            raw = line.encode()
            obj = orjson.loads(raw)
            if orjson.dumps(obj) == column_reader._squeezed(raw):
                assert column_reader._runs_of(obj) == column_reader._runs_with_paths(raw), (name, line[:200])
                walked += 1
    assert walked > 1000


def test_a_large_file_is_scanned_past_the_page_cache(tmp_path, monkeypatch):
    from tusk.ir import direct_write

    path, _ = _rotated_file(tmp_path)
    made = []
    real = direct_write.DirectReader

    def spy(p):
        made.append(p)
        return real(p)

    monkeypatch.setattr(column_reader, "DIRECT_READ_BYTES", 1)
    monkeypatch.setattr(direct_write, "DirectReader", spy)
    monkeypatch.setattr(direct_write, "CHUNK", 8192)   # many chunks, each window spanning several
    monkeypatch.setattr(column_reader, "READ_BYTES", 5000)
    assert column_reader.ColumnLoad(str(path)).load() == bir_json.load(path, fast=False)
    assert made == [str(path)]
