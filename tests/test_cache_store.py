"""The content-addressed store: objects, records, integrity, concurrency, maintenance."""

from __future__ import annotations

import json
import multiprocessing
import os
import pickle

import numpy as np
import pytest

from tests.passes_for_tests import flip_a_byte
from tests.programs import tiled_exp_module
from tusk.cache import ObjectDamaged, ObjectMissing, Store, parse_size
from tusk.cache import objects as objects_mod
from tusk.cache.keys import Uncacheable, action_key, canonical, code_digest, digest
from tusk.ir.errors import TuskError
from tusk.ir.serial import content_hash


@pytest.fixture
def store(tmp_path):
    return Store(tmp_path / "store")


def test_object_round_trip_keeps_content_hash(store, family_module):
    h = store.put(family_module)
    assert h == content_hash(family_module)
    back = store.load(h)
    assert back == family_module
    assert content_hash(back) == h


def test_object_is_a_zarr_group_with_a_subgroup_per_function(store, tiled_module):
    import zarr

    h = store.put(tiled_module)
    g = zarr.open_group(store.object_path(h), mode="r")
    head = g.attrs["tusk"]
    assert head["complete"] is True and head["hash"] == h
    assert [e["name"] for e in head["functions"]] == [f.name for f in tiled_module.functions]
    assert "packed" in g["f0"]


def test_large_columns_get_arrays_of_their_own(store, monkeypatch, tiled_module):
    monkeypatch.setattr(objects_mod, "LARGE_COLUMN", 16)
    h = store.put(tiled_module)
    import zarr

    from tusk.ir.serial import module_to_parts

    root = zarr.open_group(store.object_path(h), mode="r")
    f0 = root["f0"]
    arrays = module_to_parts(tiled_module)[1][0][0]
    expect = sorted(k for k, a in arrays.items() if a.nbytes >= 16)
    assert sorted(root.attrs["tusk"]["functions"][0]["arrays"]) == expect and "operands.offset" in expect
    assert f0["operands.offset"].dtype == np.int64
    assert store.load(h) == tiled_module


def test_put_twice_writes_once(store, family_module):
    h1 = store.put(family_module)
    h2 = store.put(family_module)
    assert h1 == h2
    assert store.counters.objects_written == 1
    assert list(store.object_hashes()) == [h1]


def test_flipped_byte_is_detected_and_the_object_removed(store, family_module):
    h = store.put(family_module)
    flip_a_byte(store.object_path(h))
    with pytest.raises(ObjectDamaged):
        store.load(h)
    assert not store.has(h)
    assert store.get(h) is None
    assert h in store.counters.damaged


def test_object_without_completion_marker_is_a_miss(store, family_module):
    h = store.put(family_module)
    meta = os.path.join(store.object_path(h), "zarr.json")
    doc = json.load(open(meta))
    doc["attributes"]["tusk"]["complete"] = False
    json.dump(doc, open(meta, "w"))
    assert not store.has(h)
    with pytest.raises(ObjectDamaged):
        store.load(h)
    assert store.put(family_module) == h  # rewritten in place of the damaged one
    assert store.load(h) == family_module


def test_an_object_of_another_module_format_is_named_as_such(store, family_module):
    """An object an older Tusk wrote (another module format: names were SHA-256 digests before format 3) is
    not usable, and the verifier says why instead of calling its content damaged."""
    h = store.put(family_module)
    meta = os.path.join(store.object_path(h), "zarr.json")
    doc = json.load(open(meta))
    doc["attributes"]["tusk"]["serial"] = 2
    json.dump(doc, open(meta, "w"))
    assert not store.has(h)
    assert "another version of Tusk (module format 2" in store.verify_object(h)
    key = action_key({"pass": "p", "input": h})
    store.put_action(key, {"kind": "action", "output": h})
    res = store.verify()
    assert res["outdated_objects"] == [h] and res["outdated_records"] == 1
    assert res["damaged_objects"] == [] and res["bad_records"] == []  # not damage: an upgrade leaves them
    assert store.verify(remove=True)["outdated_objects"] == [h]
    assert store.get_action(key) is None and store.verify()["outdated_objects"] == []
    assert store.put(family_module) == h and store.load(h) == family_module


def test_missing_object(store):
    with pytest.raises(ObjectMissing):
        store.load("ab" * 32)


def test_action_record_whose_output_is_missing_is_a_miss(store, family_module):
    h = store.put(family_module)
    key = action_key({"pass": "p", "input": h})
    store.put_action(key, {"input": h, "output": h, "stats": {"n": 1}})
    assert store.get_action(key)["stats"] == {"n": 1}
    store.discard(h)
    assert store.get_action(key) is None


def test_garbage_action_record_is_a_miss(store, family_module):
    h = store.put(family_module)
    key = digest("k")
    store.put_action(key, {"output": h})
    with open(store.action_path(key), "wb") as fh:
        fh.write(b"{not json")
    assert store.get_action(key) is None


def test_reads_never_unpickle(store, family_module, monkeypatch):
    h = store.put(family_module)
    key = digest("x")
    store.put_action(key, {"output": h})

    def no(*a, **k):
        raise AssertionError("pickle used by the store")

    monkeypatch.setattr(pickle, "loads", no)
    monkeypatch.setattr(pickle, "load", no)
    assert store.load(h) == family_module
    assert store.get_action(key)["output"] == h


def _put_in_process(root: str, tiles: int) -> str:
    return Store(root).put(tiled_exp_module(tiles=tiles))


def test_processes_writing_the_same_object_all_succeed(tmp_path):
    root = str(tmp_path / "store")
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(4) as pool:
        hashes = pool.starmap(_put_in_process, [(root, 3)] * 8)
    assert len(set(hashes)) == 1
    store = Store(root)
    assert list(store.object_hashes()) == hashes[:1]
    assert store.load(hashes[0]) == tiled_exp_module(tiles=3)
    assert store.fs.listdir(store.fs.path("tmp")) == []


@pytest.mark.parametrize("scheme", ["file", "memory"])
def test_store_addressed_by_url(tmp_path, scheme, family_module):
    url = f"file://{tmp_path}/s" if scheme == "file" else f"memory://tusk-test-{os.getpid()}"
    store = Store(url)
    h = store.put(family_module)
    assert store.has(h)
    assert store.load(h) == family_module
    key = digest("u")
    store.put_action(key, {"output": h})
    assert store.get_action(key)["output"] == h
    assert store.info()["objects"] == 1
    store.clear()
    assert not store.has(h)


def test_verify_reports_and_removes_damaged_objects(store, family_module, tiled_module):
    good, bad = store.put(family_module), store.put(tiled_module)
    store.put_action(digest("a"), {"output": bad})
    flip_a_byte(store.object_path(bad))
    res = store.verify()
    assert [h for h, _ in res["damaged_objects"]] == [bad] and res["objects_ok"] == 1
    assert store.has(bad)  # reported, not removed
    res = store.verify(remove=True)
    assert not os.path.exists(store.object_path(bad)) and store.has(good)
    assert store.verify()["damaged_objects"] == [] and store.verify()["bad_records"] == []


def test_gc_keeps_the_most_recently_used_results(store):
    hashes = []
    for k in range(4):
        h = store.put(tiled_exp_module(tiles=k + 1))
        key = digest(f"action{k}")
        store.put_action(key, {"input": h, "output": h})
        os.utime(store.action_path(key), (1000 + k, 1000 + k))  # action k used at time 1000+k
        hashes.append(h)
    store.touch_action(digest("action0"))  # used just now: the newest
    entry = [store.usage("objects", h[:2], h) + store.fs.usage(store.action_path(digest(f"action{k}")))
             for k, h in enumerate(hashes)]
    skeleton = store.usage() - sum(entry)
    res = store.gc(max_bytes=skeleton + entry[0] + entry[3] + min(entry[1], entry[2]) - 1, grace=0)
    kept = set(store.object_hashes())
    assert hashes[0] in kept and hashes[3] in kept
    assert hashes[1] not in kept and hashes[2] not in kept
    assert res["removed_actions"] == 2 and res["bytes_after"] < res["bytes_before"]
    assert res["bytes_after"] == store.usage() <= res["max_bytes"]


def _built_cache(tmp_path, monkeypatch) -> Store:
    """A cache as `tusk compile` fills it: records, objects, timing notes, timelines, ETA history, memos."""
    import shutil
    from pathlib import Path

    from typer.testing import CliRunner

    from tusk.workflows.cli import app

    src = Path(__file__).resolve().parent.parent / "examples" / "kernels"
    kdir = tmp_path / "k"
    kdir.mkdir()
    for name in ("add_tiles.klr", "rmsnorm.klr", "tiled_exp.json", "tiled_softmax.json"):
        shutil.copy(src / name, kdir / name)
    for var in ("TUSK_ARCH", "TUSK_INSTRUCTION_LIMIT", "MAXHU", "TUSK_WORKERS", "TUSK_VERIFY"):
        monkeypatch.delenv(var, raising=False)
    cache = tmp_path / "cache"
    res = CliRunner().invoke(app, ["compile", str(kdir), "-o", str(tmp_path / "out"), "--cache-dir", str(cache),
                                   "--workers", "0", "--progress", "off"])
    assert res.exit_code == 0, res.output
    return Store(cache)


def _age(store: Store, seconds: float) -> None:
    """Every file of the store ``seconds`` older, their order kept (past gc's grace for young objects)."""
    for path, _size, mtime in list(store.fs.walk_files(store.fs.root)):
        os.utime(path, (mtime - seconds, mtime - seconds))


def _dangling(store: Store) -> list[str]:
    """Records and notes that name an object the store does not have."""
    bad = []
    for key in store.action_keys():
        rec = store.read_action(key)
        if rec is None or rec.get("kind") == "failure":
            continue
        for h in (rec.get("input"), rec.get("output"), *rec.get("refs", [])):
            if isinstance(h, str) and not store.has(h):
                bad.append(f"action {key} -> {h}")
    for kind, key in store.note_keys():
        value = store.get_note(kind, key, touch=False)
        if isinstance(value, dict) and isinstance(value.get("hash"), str) and not store.has(value["hash"]):
            bad.append(f"note {kind}/{key} -> {value['hash']}")
    return bad


def test_gc_brings_a_built_cache_under_the_size_objects_and_notes_included(tmp_path, monkeypatch):
    store = _built_cache(tmp_path, monkeypatch)
    _age(store, 3600)
    info = store.info()
    assert info["notes"] > 0 and info["bytes"] == store.usage()
    for limit in (info["bytes"] * 2 // 3, info["bytes"] // 3, info["bytes"] // 10):
        res = store.gc(limit)
        assert store.usage() <= limit, (limit, res)
        assert res["bytes_after"] == store.usage()
        assert _dangling(store) == []
    assert res["removed_objects"] > 0 or store.info()["objects"] == 0


def test_gc_drops_the_oldest_notes_before_newer_records(tmp_path, monkeypatch):
    store = _built_cache(tmp_path, monkeypatch)
    _age(store, 3600)
    timelines = [(k, key) for k, key in store.note_keys() if k in ("engine-timeline", "engine-timeline-events", "makespan",
                                                                          "makespan-explain")]
    assert timelines
    for kind, key in timelines:  # the timing notes were used long before anything else
        os.utime(store.note_path(kind, key), (1000, 1000))
    notes_bytes = sum(store.fs.usage(store.note_path(k, key)) for k, key in timelines)
    actions, objects = store.info()["actions"], store.info()["objects"]
    res = store.gc(store.usage() - notes_bytes // 2)
    assert res["removed_notes"] > 0 and res["removed_actions"] == 0 and res["removed_objects"] == 0
    assert store.info()["actions"] == actions and store.info()["objects"] == objects
    assert store.usage() <= res["max_bytes"]


def test_gc_cli_reaches_its_target_and_the_next_build_still_works(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from tusk.workflows.cli import app

    store = _built_cache(tmp_path, monkeypatch)
    _age(store, 3600)
    limit = store.usage() // 2
    res = CliRunner().invoke(app, ["cache", "gc", "--max-size", str(limit), "--cache-dir", str(store.url)])
    assert res.exit_code == 0 and "note(s)" in res.output, res.output
    assert store.usage() <= limit and _dangling(store) == []
    again = CliRunner().invoke(app, ["compile", str(tmp_path / "k"), "-o", str(tmp_path / "out2"), "--cache-dir",
                                     str(store.url), "--workers", "0", "--progress", "off", "--json"])
    assert again.exit_code == 0, again.output


def test_clear_refuses_a_directory_that_is_not_a_store(tmp_path):
    (tmp_path / "precious.txt").write_text("keep me")
    with pytest.raises(TuskError, match="not a Tusk store"):
        Store(tmp_path).clear()
    assert (tmp_path / "precious.txt").exists()


def test_gc_and_verify_remove_refuse_a_directory_that_is_not_a_store(tmp_path):
    for d in ("tmp/w", "trash/x", "objects/ab/" + "ab" * 32):
        (tmp_path / d).mkdir(parents=True)
    old = os.path.getmtime(tmp_path) - 7200
    os.utime(tmp_path / "tmp" / "w", (old, old))
    for call in (lambda s: s.gc(1 << 30), lambda s: s.verify(remove=True)):
        with pytest.raises(TuskError, match="not a Tusk store"):
            call(Store(tmp_path))
    assert all((tmp_path / d).is_dir() for d in ("tmp/w", "trash/x", "objects/ab/" + "ab" * 32))
    assert Store(tmp_path / "nothing").gc(0)["removed_objects"] == 0  # nothing there: nothing to refuse


def test_clear_empties_a_store(store, family_module):
    store.put(family_module)
    store.clear()
    assert store.info()["objects"] == 0


def test_parse_size():
    assert parse_size("500M") == 500 * 1024 ** 2
    assert parse_size("2G") == 2 * 1024 ** 3
    assert parse_size("1.5GB") == int(1.5 * 1024 ** 3)
    assert parse_size("123") == 123
    with pytest.raises(TuskError):
        parse_size("lots")


def test_keys_are_canonical():
    assert canonical({"b": 1, "a": (1, 2.5)}) == b'{"a":[1,2.5],"b":1}'
    assert action_key({"x": 1, "y": [1]}) == action_key({"y": (1,), "x": 1})
    assert action_key({"x": 1}) != action_key({"x": 2})
    with pytest.raises(Uncacheable):
        canonical({"x": object()})


def test_code_digest_follows_the_pass_source():
    from tests.passes_for_tests import Count, Scale

    assert code_digest(Scale) == code_digest(Count)  # same file
    assert len(code_digest(Scale)) == 64


def test_an_object_rewritten_with_other_codecs_or_shapes_is_refused_before_decoding(store, monkeypatch,
                                                                                   tiled_module):
    """A crafted object (codec changed, array grown) is damaged, not decoded: nothing huge is ever read."""
    import zarr

    monkeypatch.setattr(objects_mod, "LARGE_COLUMN", 16)
    h = store.put(tiled_module)
    g = zarr.open_group(store.object_path(h), mode="r+")["f0"]
    data = g["operands.offset"][...]
    del g["operands.offset"]
    g.create_array("operands.offset", shape=data.shape, dtype=data.dtype, compressors=None)[...] = data
    with pytest.raises(ObjectDamaged, match="not what Tusk writes"):
        store.load(h)
    h = store.put(tiled_module)
    g = zarr.open_group(store.object_path(h), mode="r+")["f0"]
    del g["operands.offset"]
    g.create_array("operands.offset", shape=(1 << 40,), dtype=np.int64, chunks=(1 << 20,),
                   compressors=objects_mod._compressors())
    assert store.verify_object(h) is not None and "not what Tusk writes" in store.verify_object(h)


def test_objects_are_zarr_v3_groups_that_zarr_itself_reads(store, monkeypatch, tmp_path, tiled_module):
    """Tusk writes the Zarr files directly (for speed); zarr-python must read them and write the same metadata."""
    import zarr

    from tusk.ir.serial import module_to_parts

    monkeypatch.setattr(objects_mod, "LARGE_COLUMN", 16)
    monkeypatch.setattr(objects_mod, "CHUNK_ROWS", 3)  # several chunks, the last one partial
    h = store.put(tiled_module)
    root = zarr.open_group(store.object_path(h), mode="r")
    assert root.attrs["tusk"]["hash"] == h
    arrays = module_to_parts(tiled_module)[1][0][0]
    large = root.attrs["tusk"]["functions"][0]["arrays"]
    assert large
    for key in large:
        ours = root["f0"][key]
        assert np.array_equal(ours[...], arrays[key])
        zarr.open_group(tmp_path / "ref", mode="a").create_array(
            key, shape=ours.shape, dtype=ours.dtype, chunks=ours.chunks, compressors=objects_mod._compressors())
        with open(os.path.join(store.object_path(h), "f0", key, "zarr.json")) as fh:
            mine = json.load(fh)
        with open(tmp_path / "ref" / key / "zarr.json") as fh:
            assert json.load(fh) == mine
    assert store.load(h) == tiled_module


def test_gc_drops_a_record_whose_object_is_gone(store):
    h = store.put(tiled_exp_module(tiles=2))
    store.put_action(digest("gone"), {"input": "ab" * 32, "output": h})  # its input was never stored
    store.put_action(digest("fine"), {"input": h, "output": h})
    res = store.gc(1 << 30, grace=0)
    assert res["removed_actions"] == 1 and store.read_action(digest("gone")) is None
    assert store.get_action(digest("fine"))["output"] == h
