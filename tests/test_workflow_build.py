"""The build graph, run in-process: counting real pass executions, cutoff, repair, failures."""

from __future__ import annotations

import pytest

from tests.passes_for_tests import TEST_REGISTRY, ExpandBirKernel, PerFunction, flip_a_byte
from tests.programs import every_family_module, tiled_exp_module
from tusk import stages
from tusk.cache import Store
from tusk.ir.errors import TuskError
from tusk.ir.module import Module
from tusk.ir.serial import content_hash
from tusk.workflows.graph import BuildUnit, InlineExecutor, build
from tusk.workflows.pipeline import Entry, _labelled, resolve


@pytest.fixture(autouse=True)
def registered_test_passes(monkeypatch):
    for name, target in TEST_REGISTRY.items():
        monkeypatch.setitem(stages.REGISTRY, name, target)


@pytest.fixture
def store(tmp_path):
    return Store(tmp_path / "store")


def steps(scale=2.0, salt=0, tag="x", extra=()):
    entries = [Entry("test_scale", {"factor": scale}), Entry("test_identity", {"salt": salt}),
               Entry("test_count"), Entry("test_per_function", {"tag": tag}), *extra]
    return resolve(_labelled(entries)).steps


def two_functions(tiles=2) -> Module:
    a = every_family_module()
    f = tiled_exp_module(tiles=tiles).functions[0].copy()
    f.name = "second"
    return Module([a.functions[0], f], attributes=a.attributes)


def units():
    return [BuildUnit("family", every_family_module()), BuildUnit("tiled", tiled_exp_module()),
            BuildUnit("pair", two_functions())]


def no_cluster():
    raise AssertionError("a cluster was started although every action was cached")


LABELS = ["test_scale", "test_identity", "test_count", "test_per_function"]


def test_cold_build_runs_every_pass_of_every_unit(store):
    rep = build(units(), steps(), store)
    assert sorted(rep.executions()) == sorted((u, s) for u in ("family", "tiled", "pair") for s in LABELS)
    assert all(u.ok for u in rep.units)
    final = store.load(rep.unit("family").final)
    assert final.attributes["test_scale"] == 2.0 and final.attributes["test_count"] == final.n_insts()


def test_noop_rebuild_executes_nothing_and_starts_no_cluster(store):
    first = build(units(), steps(), store)
    rep = build(units(), steps(), store, executor=no_cluster)
    assert rep.executions() == [] and rep.n_cached == 12
    assert not rep.cluster_started
    assert [u.final for u in rep.units] == [u.final for u in first.units]


def test_changed_option_reruns_that_pass_and_its_successors_only(store):
    build(units(), steps(), store)
    rep = build(units(), steps(tag="y"), store)  # the last pass
    assert sorted(rep.executions()) == sorted((u, "test_per_function") for u in ("family", "tiled", "pair"))
    rep = build(units(), steps(scale=3.0, tag="y"), store)  # the first pass
    assert sorted(rep.executions()) == sorted((u, s) for u in ("family", "tiled", "pair") for s in LABELS)


def test_pass_with_unchanged_output_cuts_off_its_successors(store):
    build(units(), steps(), store)
    rep = build(units(), steps(salt=7), store)
    assert sorted(rep.executions()) == sorted((u, "test_identity") for u in ("family", "tiled", "pair"))
    ident = rep.unit("tiled").steps[1]
    assert ident.status == "executed" and ident.input == ident.output
    assert [s.status for s in rep.unit("tiled").steps[2:]] == ["cached", "cached"]


def test_changed_input_rebuilds_only_that_unit(store):
    build(units(), steps(), store)
    changed = [BuildUnit("family", every_family_module()), BuildUnit("tiled", tiled_exp_module(tiles=5)),
               BuildUnit("pair", two_functions())]
    rep = build(changed, steps(), store)
    assert sorted(rep.executions()) == sorted(("tiled", s) for s in LABELS)


def test_kernel_file_digest_is_part_of_the_first_key(store):
    u = lambda d: [BuildUnit("k", tiled_exp_module(), files={"/k.json": d})]  # noqa: E731
    first = build(u("aa"), steps(), store)
    prev = {"k": {s.label: s.key_parts for s in first.unit("k").steps}}
    rep = build(u("bb"), steps(), store, previous=prev)
    assert rep.unit("k").steps[0].reason == "kernel file changed: k.json"
    # the host module did not change, so the re-run pass gives the same output: the rest is cut off
    assert rep.executions() == [("k", "test_scale")]


def test_splittable_pass_runs_one_task_per_part_and_matches_the_serial_run(store):
    rep = build([BuildUnit("pair", two_functions())], steps(), store)
    split = rep.unit("pair").steps[3]
    assert split.parts_total == 2 and split.parts_executed == 2
    # stats.json says where a split step's time went: the split, each part, and (the rest) the merge
    assert split.split_seconds is not None and len(split.part_seconds) == 2
    assert all(isinstance(x, float) for x in split.part_seconds)
    assert split.seconds >= split.split_seconds + sum(split.part_seconds)
    again = build([BuildUnit("pair", two_functions())], steps(), store).unit("pair").steps[3]
    assert again.status == "cached" and again.part_seconds == split.part_seconds  # the record keeps them
    assert again.split_seconds == split.split_seconds
    before = store.load(split.input)
    serial, _ = PerFunction(tag="x").run(before)
    assert content_hash(serial) == split.output


def test_only_the_changed_part_of_a_split_pass_reruns(store):
    build([BuildUnit("pair", two_functions(tiles=2))], steps(), store)
    rep = build([BuildUnit("pair", two_functions(tiles=3))], steps(), store)
    split = rep.unit("pair").steps[3]
    assert split.status == "executed" and (split.parts_total, split.parts_executed) == (2, 1)
    assert sum(x is None for x in split.part_seconds) == 1  # the part that came from the cache


def test_same_action_in_two_units_runs_once(store):
    rep = build([BuildUnit("a", tiled_exp_module()), BuildUnit("b", tiled_exp_module())], steps(), store)
    assert len(rep.executions()) == 4  # one unit ran them, the other waited on the same tasks
    assert rep.unit("a").final == rep.unit("b").final


def test_damaged_final_object_is_detected_and_rebuilt(store):
    first = build(units(), steps(), store)
    final = first.unit("tiled").final
    flip_a_byte(store.object_path(final))
    loaded = {}

    def read_it(u, h):
        loaded[u.unit.name] = store.load(h)  # a damaged object raises: the build recomputes it

    rep = build(units(), steps(), store, on_final=read_it)
    assert rep.executions() == [("tiled", "test_per_function")]
    assert rep.unit("tiled").final == final and rep.unit("tiled").repairs == 1
    assert content_hash(loaded["tiled"]) == final


def test_damaged_final_object_found_while_writing_outputs_is_rebuilt(store, tmp_path):
    from tusk.ir import bir_json

    first = build(units(), steps(), store)
    final = first.unit("family").final
    flip_a_byte(store.object_path(final))
    paths = {}

    def outputs(u, h):
        paths[u.unit.name] = tmp_path / f"{u.unit.name}.bir.json"
        return [(h, paths[u.unit.name])]

    rep = build(units(), steps(), store, on_final=outputs)
    assert rep.executions() == [("family", "test_per_function")] and rep.unit("family").repairs == 1
    assert bir_json.load(paths["family"]) == store.load(final)


def test_damaged_intermediate_object_is_rebuilt_when_needed(store):
    first = build(units(), steps(), store)
    middle = first.unit("tiled").steps[2].output  # test_count's output, test_per_function's input
    flip_a_byte(store.object_path(middle))
    rep = build(units(), steps(tag="z"), store)
    tiled = [s for u, s in rep.executions() if u == "tiled"]
    assert tiled == ["test_count", "test_per_function"]
    assert rep.unit("tiled").ok and rep.unit("tiled").steps[2].output == middle
    # the object is back, intact, and is what test_count makes of its input
    assert store.verify_object(middle) is None
    again = store.load(middle)
    assert content_hash(again) == middle and again.attributes["test_count"] == again.n_insts()


def test_missing_host_object_is_put_back(store):
    first = build(units(), steps(), store)
    host = first.unit("family").steps[0].input
    store.discard(host)
    assert not store.has(host)
    rep = build(units(), steps(tag="q"), store)
    assert rep.unit("family").ok and rep.unit("family").steps[0].input == host
    assert store.has(host) and store.verify_object(host) is None
    assert store.load(host) == every_family_module()  # put back: the unit's own module


def test_a_failing_pass_fails_its_unit_and_the_others_complete(store):
    fail = resolve(_labelled([Entry("test_scale"), Entry("test_fail", {"when": "second"}), Entry("test_count")]))
    rep = build(units(), fail.steps, store)
    bad = rep.unit("pair")
    assert not bad.ok and "refusing" in bad.error
    assert [s.status for s in bad.steps] == ["executed", "failed"]
    assert rep.unit("family").ok and rep.unit("tiled").ok
    assert ("family", "test_count") in rep.executions()


def test_action_records_hold_stats_and_timings(store):
    rep = build([BuildUnit("t", tiled_exp_module())], steps(), store)
    step = rep.unit("t").steps[2]
    rec = store.get_action(step.key)
    assert rec["stats"] == {"instructions": tiled_exp_module().n_insts()}
    assert rec["seconds"] >= 0 and rec["input"] == step.input and rec["output"] == step.output
    assert rec["parts"]["options"] == {} and rec["pass"] == "test_count"


def test_reasons_say_why_a_pass_ran(store):
    first = build(units(), steps(), store)
    prev = {u.unit.name: {s.label: s.key_parts for s in u.steps} for u in first.units}
    rep = build(units(), steps(scale=5.0), store, previous=prev)
    reasons = [s.reason for s in rep.unit("family").steps]
    assert reasons[0] == "options changed: test_scale.factor 2.0 -> 5.0" and reasons[1] == "input changed"


def test_memory_store_with_inline_executor(family_module):
    store = Store("memory://tusk-build-test")
    rep = build([BuildUnit("f", family_module)], steps(), store, executor=InlineExecutor)
    assert rep.unit("f").ok and len(rep.executions()) == 4
    store.clear()


def test_expand_stand_in_reads_the_kernel_file(tmp_path, store):
    from tusk.ir import bir_json
    from tusk.workflows.kernels import discover, host_module

    d = tmp_path / "k"
    d.mkdir()
    bir_json.save(tiled_exp_module(tiles=3), d / "t.json")
    k = discover(d)[0][0]
    from tusk.workflows.tasks import bind

    out, stats = ExpandBirKernel().run(bind(host_module(k, 0), {"kernel_dir": str(d)}))
    assert stats == {"expanded": 1} and out.functions[0].n_insts == tiled_exp_module(tiles=3).n_insts()


def test_a_worker_with_other_pass_code_refuses_to_run(store):
    from dataclasses import replace

    step = replace(steps()[0], code="0" * 64)
    rep = build([BuildUnit("t", tiled_exp_module())], [step], store)
    assert not rep.unit("t").ok and "different version of pass test_scale" in rep.unit("t").error


def test_a_deterministic_failure_is_cached_and_reported_again(store):
    fail = resolve(_labelled([Entry("test_scale"), Entry("test_fail", {"when": "second"}), Entry("test_count")]))
    first = build(units(), fail.steps, store)
    rep = build(units(), fail.steps, store, executor=no_cluster)
    assert rep.executions() == [] and not rep.cluster_started
    bad = rep.unit("pair")
    assert bad.error == first.unit("pair").error and bad.steps[-1].reason.startswith("cached failure: ")


def test_an_unexpected_exception_is_not_cached(store):
    fail = resolve(_labelled([Entry("test_fail", {"when": "second", "internal": True})]))
    first = build(units(), fail.steps, store)
    assert "RuntimeError" in first.unit("pair").error and first.unit("family").ok
    rep = build(units(), fail.steps, store)
    assert not rep.unit("pair").ok and not rep.unit("pair").steps[-1].reason.startswith("cached")


def many_functions(n=10) -> Module:
    fns = []
    for k in range(n):
        f = tiled_exp_module(tiles=1).functions[0].copy()
        f.name = f"f{k}"
        fns.append(f)
    return Module(fns)


def test_many_damaged_part_objects_cost_one_repair(store):
    """All objects damaged (heads intact), then one function changes: the other parts' records hit, and
    merge finds every damaged part output at once, so a 10-part unit does not run out of repairs."""
    build([BuildUnit("many", many_functions())], steps(), store)
    for h in list(store.object_hashes()):
        flip_a_byte(store.object_path(h))
    changed = many_functions()
    changed.functions[0] = tiled_exp_module(tiles=9).functions[0].copy()
    rep = build([BuildUnit("many", changed)], steps(), store)
    assert rep.unit("many").ok, rep.unit("many").error
    assert rep.unit("many").repairs <= 2
    for s in rep.unit("many").steps:
        assert store.verify_object(s.output) is None


def test_put_replaces_an_object_this_process_found_damaged(store, monkeypatch):
    m = tiled_exp_module()
    h = store.put(m)
    flip_a_byte(store.object_path(h))
    monkeypatch.setattr(store.fs, "remove_tree", lambda p: None)  # the damaged copy cannot be moved away
    with pytest.raises(TuskError):  # damaged, and (here) it cannot be removed
        store.load(h)
    monkeypatch.undo()
    assert store.has(h)  # its head still looks complete ...
    store.put(m)  # ... but it is not trusted: replaced
    assert store.verify_object(h) is None and store.load(h) == m


def _scale_kernel(path, factor: float) -> None:
    from tusk.frontend.klr_writer import KernelWriter

    k = KernelWriter("scale")
    x, y = k.input("x", (128, 16)), k.output("y", (128, 16))
    t = k.sbuf("t", (128, 16), addr=0)
    k.dma(t, x)
    k.tensor_scalar(t, t, "mult", factor)
    k.dma(y, t)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(k.to_bytes())


def _klr_unit(d, art) -> BuildUnit:
    from tusk.workflows.kernels import discover, file_digests, host_module

    k = discover(d)[0][0]
    return BuildUnit(k.name, host_module(k, 0), files=file_digests(k), kernel=k.name,
                     where={"artifact_dir": str(art), "kernel_dir": str(d.resolve())})


def test_translate_is_keyed_on_the_kernel_files_wherever_it_runs(tmp_path, store):
    d, art = tmp_path / "k", tmp_path / "out" / "scale"
    pipe = resolve(_labelled([Entry("test_count"), Entry("translate_nki_ast_to_bir")])).steps
    _scale_kernel(d / "scale.klr", 2.0)
    first = build([_klr_unit(d, art)], pipe, store)
    _scale_kernel(d / "scale.klr", 3.0)  # same interface, same host module: only the file changed
    rep = build([_klr_unit(d, art)], pipe, store)
    assert ("scale", "translate_nki_ast_to_bir") in rep.executions()
    assert rep.unit("scale").final != first.unit("scale").final


def test_translate_failures_are_not_recorded(tmp_path, store):
    """A failure caused by the artifact directory (not in the key) must not be replayed once it is fixed."""
    d, art = tmp_path / "k", tmp_path / "out" / "scale"
    pipe = resolve(_labelled([Entry("translate_nki_ast_to_bir")])).steps
    _scale_kernel(d / "scale.klr", 2.0)
    art.mkdir(parents=True)
    (tmp_path / "outside.klr").write_text("x")
    (art / "scale.klr").symlink_to(tmp_path / "outside.klr")
    rep = build([_klr_unit(d, art)], pipe, store)
    assert "resolves outside the artifact directory" in rep.unit("scale").error
    assert store.get_failure(rep.unit("scale").steps[0].key) is None
    (art / "scale.klr").unlink()
    rep = build([_klr_unit(d, art)], pipe, store)
    assert rep.unit("scale").ok and rep.executions() == [("scale", "translate_nki_ast_to_bir")]
    assert (tmp_path / "outside.klr").read_text() == "x"


def _final_output(tmp_path, name):
    def on_final(u, h):
        return [(h, tmp_path / f"{name}.bir.json", str(tmp_path / "art"))]
    return on_final


def test_a_big_final_output_is_checked_by_tasks_beside_its_write(tmp_path, monkeypatch):
    """The verifier's checks of the last step's output run as tasks while it is written; its record is written
    once they pass, and the bytes and the record are those of a build that checked it before writing."""
    from tusk.ir import verify as verify_mod

    monkeypatch.setattr(verify_mod, "SPLIT_MIN", 1)  # every function is "big"
    chain = resolve(_labelled([Entry("unroll"), Entry("build_fdeps")])).steps
    module = tiled_exp_module(tiles=12)
    inline = build([BuildUnit("k", module)], chain, Store(tmp_path / "s1"), verify="ends",
                   on_final=_final_output(tmp_path, "inline"), defer_checks=False)
    seen = []
    deferred_store = Store(tmp_path / "s2")
    deferred = build([BuildUnit("k", module)], chain, deferred_store, verify="ends",
                     on_final=_final_output(tmp_path, "deferred"), defer_checks=True,
                     on_event=lambda e: seen.append(e.what if type(e).__name__ == "TaskSubmitted" else None))
    assert inline.unit("k").ok and deferred.unit("k").ok
    assert [w for w in seen if w and w.startswith("verify")] == ["verify 1/3", "verify 2/3", "verify 3/3"]
    assert (tmp_path / "deferred.bir.json").read_bytes() == (tmp_path / "inline.bir.json").read_bytes()
    last = deferred.unit("k").steps[-1]
    rec = deferred_store.get_action(last.key)
    assert rec["output"] == inline.unit("k").steps[-1].output and "verify" in rec["timing"]
    again = build([BuildUnit("k", module)], chain, deferred_store, verify="ends", defer_checks=True)
    assert again.unit("k").ok and again.n_executed == 0


def test_a_final_output_that_fails_its_checks_fails_the_kernel_and_is_not_recorded(tmp_path, monkeypatch):
    from tusk.ir import verify as verify_mod

    monkeypatch.setattr(verify_mod, "SPLIT_MIN", 1)
    chain = resolve(_labelled([Entry("unroll"), Entry("test_break_refs")])).steps
    store = Store(tmp_path / "store")
    for _ in range(2):  # nothing recorded: the second build runs the pass and fails again
        res = build([BuildUnit("k", tiled_exp_module(tiles=4))], chain, store, verify="ends",
                    on_final=_final_output(tmp_path, "out"), defer_checks=True)
        u = res.unit("k")
        assert not u.ok and "produced invalid IR" in u.error and "memory location" in u.error
        assert u.steps[-1].status == "failed" and store.get_action(u.steps[-1].key) is None
        assert [s.status for s in u.steps[:-1]] == (["executed"] if _ == 0 else ["cached"])
