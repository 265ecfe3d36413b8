"""The pipeline: backend order, availability, --set, TOML files."""

from __future__ import annotations

import pytest

from tests.passes_for_tests import TEST_REGISTRY, pipeline_toml
from tusk import stages
from tusk.ir.errors import TuskError
from tusk.workflows.pipeline import (
    DEFAULT_ORDER,
    Entry,
    _labelled,
    apply_sets,
    default_pipeline,
    load_pipeline,
    resolve,
)


@pytest.fixture
def registered_test_passes(monkeypatch):
    for name, target in TEST_REGISTRY.items():
        monkeypatch.setitem(stages.REGISTRY, name, target)


def test_default_pipeline_follows_the_backend_order():
    labels = [e.label for e in default_pipeline()]
    # raise_loops (Tusk's) turns KLR's counted register loops into static loops before the unroll passes
    assert labels[:4] == ["translate_nki_ast_to_bir", "raise_loops", "heuristic_unroll", "unroll"]
    assert labels[4:7] == ["address_rotation_psum", "address_rotation_sb", "address_rotation_dram"]
    # edges built for the rotated addresses, scheduled, rotated again (rebuilding the edges of what moved)
    assert labels[7:] == ["clear_inst_deps", "build_fdeps", "schedule", "address_rotation_psum_post_schedule",
                          "address_rotation_sb#2"]
    assert labels.count("build_fdeps") == 1  # dependence analysis runs once
    assert len(labels) == len(DEFAULT_ORDER)


def test_every_default_pass_is_available():
    res = resolve(default_pipeline())
    assert res.unavailable == [] and len(res.steps) == len(DEFAULT_ORDER)


def test_only_available_passes_run_and_the_rest_are_listed():
    res = resolve(default_pipeline())
    ran = {s.label for s in res.steps}
    listed = {label for label, _ in res.unavailable}
    assert ran | listed == {e.label for e in default_pipeline()} and not ran & listed
    assert all(s.name in stages.REGISTRY for s in res.steps)
    assert all("not available" in why for _, why in res.unavailable)
    assert [s.label for s in res.steps] == [e.label for e in default_pipeline() if e.label in ran]


def test_set_changes_a_typed_option(registered_test_passes):
    entries = apply_sets(_labelled([Entry("test_scale"), Entry("test_count")]), ["test_scale.factor=2.5"])
    step = resolve(entries).steps[0]
    assert step.options == {"factor": 2.5} and step.spec == "test_scale{factor=2.5}"


def test_set_enabled_false_drops_a_step(registered_test_passes):
    entries = apply_sets(_labelled([Entry("test_scale"), Entry("test_count")]), ["test_scale.enabled=false"])
    res = resolve(entries)
    assert [s.name for s in res.steps] == ["test_count"]
    assert res.unavailable == [("test_scale", "disabled")]


def test_set_addresses_one_occurrence_of_a_repeated_pass(registered_test_passes):
    entries = _labelled([Entry("test_scale"), Entry("test_count"), Entry("test_scale")])
    assert [e.label for e in entries] == ["test_scale", "test_count", "test_scale#2"]
    apply_sets(entries, ["test_scale#2.factor=3"])
    assert [s.options["factor"] for s in resolve(entries).steps if s.name == "test_scale"] == [1.0, 3.0]
    apply_sets(entries, ["test_scale.factor=4"])
    assert [s.options["factor"] for s in resolve(entries).steps if s.name == "test_scale"] == [4.0, 4.0]


def test_set_errors_name_the_problem(registered_test_passes):
    entries = _labelled([Entry("test_scale")])
    with pytest.raises(TuskError, match="no pass 'unroll_it'"):
        apply_sets(entries, ["unroll_it.x=1"])
    with pytest.raises(TuskError, match="pass.option=value"):
        apply_sets(entries, ["factor=2"])
    apply_sets(entries, ["test_scale.nope=1"])
    with pytest.raises(TuskError, match="no option 'nope'"):
        resolve(entries)
    entries = apply_sets(_labelled([Entry("test_scale")]), ["test_scale.factor=big"])
    with pytest.raises(TuskError, match="expects float"):
        resolve(entries)


def test_unknown_pass_is_an_error_but_a_future_backend_pass_is_listed(monkeypatch):
    with pytest.raises(TuskError, match="unknown pass"):
        resolve([Entry("no_such_pass", label="no_such_pass")])
    monkeypatch.delitem(stages.REGISTRY, "address_rotation_sb")  # as in a checkout that does not have it yet
    res = resolve(_labelled([Entry("address_rotation_sb")]))
    assert res.steps == [] and res.unavailable[0][0] == "address_rotation_sb"


def test_pipeline_file_with_import_paths(tmp_path):
    f = tmp_path / "p.toml"
    f.write_text(pipeline_toml(("test_scale", {"factor": 2.0}), ("test_per_function", {"tag": "t"})))
    res = resolve(load_pipeline(f))
    assert [s.name for s in res.steps] == ["test_scale", "test_per_function"]
    assert res.steps[0].options == {"factor": 2.0}
    assert res.steps[1].splittable and not res.steps[0].splittable
    assert res.steps[0].target == TEST_REGISTRY["test_scale"]


def test_malformed_pipeline_file_names_the_file(tmp_path):
    f = tmp_path / "bad.toml"
    f.write_text("[[step]]\noptions = {}\n")
    with pytest.raises(TuskError, match="bad.toml.*missing 'pass'"):
        load_pipeline(f)
    f.write_text("[[step\n")
    with pytest.raises(TuskError, match="malformed TOML"):
        load_pipeline(f)


def test_key_parts_change_with_options_and_version(registered_test_passes):
    a = resolve(_labelled([Entry("test_scale", {"factor": 1.0})])).steps[0]
    b = resolve(_labelled([Entry("test_scale", {"factor": 2.0})])).steps[0]
    assert a.key_parts() != b.key_parts()
    assert set(a.key_parts()) == {"pass", "version", "code", "options"}
