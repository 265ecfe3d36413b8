"""The one registry: every entry is a frozen, typed pass that round-trips its spec and runs on a kernel."""

from __future__ import annotations

import dataclasses
import shutil
import typing
from pathlib import Path

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from tusk import stages
from tusk.ir.verify import verify
from tusk.stages.base import OptionError, Pass, _hints, _is_union
from tusk.stages.host import host_module_for

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "kernels"
# options a pass needs to do real work on a kernel (full_unroll's level has no working default, as in the backend)
RUN_WITH = {"full_unroll": {"level": 2}}


def _strategy(tp):
    if _is_union(tp):
        return st.one_of(*(_strategy(t) for t in typing.get_args(tp)))
    if typing.get_origin(tp) is typing.Literal:
        return st.sampled_from(typing.get_args(tp))
    return {bool: st.booleans(), int: st.integers(-(2**70), 2**70),
            float: st.floats(allow_nan=False), str: st.text(max_size=12), type(None): st.none()}[tp]


@pytest.mark.parametrize("name", sorted(stages.get_all_passes()))
def test_every_registered_pass_is_a_frozen_typed_dataclass_named_as_registered(name):
    cls = stages.get_all_passes()[name]()
    assert issubclass(cls, Pass) and cls.name == name
    assert dataclasses.is_dataclass(cls) and cls.__dataclass_params__.frozen
    assert isinstance(cls.version, str) and cls.version
    assert isinstance(cls.splittable, bool) and isinstance(cls.reads_files, bool)
    if cls.splittable:
        assert cls.split is not Pass.split and cls.merge is not Pass.merge
    p = cls()
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.version_override = 1  # no state on self
    for info in cls.options():
        assert info.help, f"{name}.{info.name} has no help line"


@pytest.mark.parametrize("name", sorted(stages.REGISTRY))
def test_every_pass_lives_in_the_module_named_after_it(name):
    """Find any pass in one hop: the backend's pass name is its module, stages/<name>.py (no exceptions)."""
    cls = stages.pass_class(name)
    assert cls.__module__ == f"tusk.stages.{name}"
    assert stages.REGISTRY[name] == f"tusk.stages.{name}:{cls.__qualname__}"
    assert (Path(stages.__file__).parent / f"{name}.py").is_file()


@pytest.mark.parametrize("name", sorted(stages.get_all_passes()))
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_options_survive_the_spec_string_round_trip(name, data):
    cls = stages.pass_class(name)
    hints = _hints(cls)
    values = {f.name: data.draw(_strategy(hints[f.name]), label=f.name) for f in dataclasses.fields(cls)}
    try:
        p = cls(**values)
    except OptionError:
        assume(False)
    assert stages.parse_pass(str(p)) == p
    assert cls.with_options(p.option_values()) == p


@pytest.fixture(scope="module")
def translated(tmp_path_factory):
    art = tmp_path_factory.mktemp("art")
    kernel = art / "tiled_softmax.json"
    shutil.copy(EXAMPLES / "tiled_softmax.json", kernel)
    out, _ = stages.make_pass("translate_nki_ast_to_bir").run(host_module_for(str(kernel), 0, str(art)))
    verify(out)
    return out


@pytest.mark.parametrize("name", sorted(set(stages.get_all_passes()) - {"translate_nki_ast_to_bir"}))
def test_every_registered_pass_runs_on_a_corpus_kernel_and_its_output_verifies(name, translated):
    p = stages.make_pass(name, **RUN_WITH.get(name, {}))
    out, stats = p.run(translated)
    verify(out)
    assert isinstance(stats, dict)
    assert translated.n_insts() > 0 and out is not translated


def test_wrong_options_are_refused_with_pass_and_option_named():
    with pytest.raises(OptionError, match=r"unroll.loops expects \"all\" \| \"marked\""):
        stages.make_pass("unroll", loops="bogus")
    with pytest.raises(OptionError, match="heuristic_unroll has no option 'maxhue'"):
        stages.make_pass("heuristic_unroll", maxhue="3")
    with pytest.raises(OptionError, match="build_fdeps.ordered expects bool"):
        stages.pass_class("build_fdeps")(ordered="yes")
    with pytest.raises(stages.UnknownPass, match="unknown pass 'unrol'"):
        stages.parse_pass("unrol{loops=all}")


def test_spec_strings_read_back_typed_values():
    assert str(stages.make_pass("unroll", loops="marked")) == "unroll{loops=marked}"
    assert stages.parse_pass("heuristic_unroll{enabled=false maxhu=none}") == \
        stages.make_pass("heuristic_unroll", enabled=False)
    assert stages.parse_pass("heuristic_unroll{maxhu=7}").maxhu == 7
    assert stages.parse_pass("clear_inst_deps") == stages.make_pass("clear_inst_deps")
