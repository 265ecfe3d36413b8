"""BIR-JSON: lossless round trips and clear errors on bad input."""

from __future__ import annotations

import copy
import json
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.programs import every_family_module, tiled_exp_module
from tusk.ir import bir_json
from tusk.ir.builder import Builder
from tusk.ir.errors import FormatError, VerifyError
from tusk.ir.module import Module
from tusk.ir.verify import verify


def test_every_builder_family_round_trips(family_module):
    text = bir_json.dumps(family_module)
    again = bir_json.loads(text)
    assert again == family_module
    assert bir_json.dumps(again) == text
    verify(again)
    emitted = {family_module.functions[0].inst(i).opname for i in range(family_module.functions[0].n_insts)}
    assert {"DMACopy", "Memset", "Iota", "TensorTensor", "TensorScalar", "TensorScalarPtr", "Activation",
            "TensorReduce", "TensorCopy", "Matmult", "RegisterMove", "RegisterAlu", "Loop"} <= emitted


def test_save_and_load_file(tmp_path, tiled_module):
    path = tmp_path / "k.json"
    bir_json.save(tiled_module, path)
    assert bir_json.load(path) == tiled_module
    assert not list(tmp_path.glob("*.tmp*")), "the atomic save left its temporary file behind"


def test_keys_are_sorted_and_the_wire_spelling_is_the_backends(tiled_module):
    doc = json.loads(bir_json.dumps(tiled_module))
    fn = doc["functions"][0]
    assert list(doc) == sorted(doc)
    assert {"allocations", "blocks", "name"} <= set(fn)
    loop = fn["blocks"][0]["instructions"][0]
    assert loop["opcode"] == "Loop" and loop["LoopAxis"] == {"name": "i", "lb": 0, "ub": 4, "stride": 1}
    dma = loop["blocks"][0]["instructions"][0]
    assert dma["opcode"] == "DMACopy" and dma["engine"] == "DMA"
    assert dma["outs"][0]["kind"] == "physical_ap" and dma["outs"][0]["memref"] == "t"
    assert dma["ins"][0]["kind"] == "symbolic_ap"
    act = loop["blocks"][0]["instructions"][1]
    assert act["dependencies"] == [["dma_copy0", "Flow"]]


def test_dependency_forms_and_strongest_kind_wins():
    doc = json.loads(bir_json.dumps(tiled_exp_module()))
    body = doc["functions"][0]["blocks"][0]["instructions"][0]["blocks"][0]["instructions"]
    body[2]["dependencies"] = ["activation0", ["activation0", "Anti"], ["dma_copy0", 2]]
    m = bir_json.from_obj(doc)
    fn = m.functions[0]
    edges = {(fn.inst_name(s), fn.inst_name(d), k) for s, d, k in
             zip(fn.deps["src"].tolist(), fn.deps["dst"].tolist(), fn.deps["kind"].tolist())}
    assert ("activation0", "dma_copy1", 4) in edges  # Flow beats Anti
    assert ("dma_copy0", "dma_copy1", 2) in edges


def test_lnc_functions_array_loads_one_function_per_core():
    doc = json.loads(bir_json.dumps(tiled_exp_module()))
    second = copy.deepcopy(doc["functions"][0])
    second["name"] = "core1"
    doc["functions"].append(second)
    m = bir_json.from_obj(doc)
    assert [f.name for f in m.functions] == ["main", "core1"]


def test_clone_names_come_from_origin_and_iteration():
    m = tiled_exp_module()
    fn = m.functions[0]
    row = fn.add_inst(12, 0, 0, fn.insts.get("name", 1), [], iteration=7)
    assert fn.inst_name(row) == "dma_copy0-it7"
    text = bir_json.dumps(m)
    assert '"name":"dma_copy0-it7"' in text
    # read back as clone 7 of dma_copy0 (the origin's string and the iteration), not as a name of its own
    back = bir_json.loads(text).functions[0]
    r = back.inst_by_name("dma_copy0-it7")
    assert back.strings[int(back.insts["name"][r])] == "dma_copy0" and int(back.insts["iter"][r]) == 7
    assert back.strings.find("dma_copy0-it7") < 0 and int(back.insts["opcode"][r]) == 12


def _doc():
    return json.loads(bir_json.dumps(every_family_module()))


def _first_inst(doc):
    return doc["functions"][0]["blocks"][0]["instructions"][0]


BAD_INPUTS = [
    ("malformed JSON", lambda d: "{not json", "malformed JSON"),
    ("unknown opcode", lambda d: _set(_first_inst(d), "opcode", "Frobnicate"), "unknown opcode 'Frobnicate'"),
    ("missing opcode", lambda d: _del(_first_inst(d), "opcode"), "missing required key 'opcode'"),
    ("missing allocation dtype", lambda d: _del(d["functions"][0]["allocations"][1], "dtype"),
     "missing required key 'dtype'"),
    ("dangling memref", lambda d: _set(_first_inst(d)["outs"][0], "memref", "nope"), "'nope' does not exist"),
    ("dangling dependency", lambda d: _set(_first_inst(d), "dependencies", [["ghost", "Flow"]]),
     "Unknown dependency 'ghost'"),
    ("ambiguous dependency", lambda d: _ambiguous(d), "ambiguous dependency"),
    ("negative size", lambda d: _set(d["functions"][0]["allocations"][1]["memorylocations"][0], "dims", [-4]),
     "expected an integer >= 0"),
    ("unknown operand kind", lambda d: _set(_first_inst(d)["outs"][0], "kind", "weird_ap"),
     "Unsupported argument kind"),
    ("unknown dtype", lambda d: _set(_first_inst(d)["outs"][0], "dtype", "float7"), "unknown dtype"),
    ("no functions", lambda d: _del(d, "functions"), "missing required key 'functions'"),
    ("too many AP dims", lambda d: _set(_first_inst(d)["outs"][0], "ap", [[1, 1]] * 5), "at most 4"),
]


def _ambiguous(d):
    insts = d["functions"][0]["blocks"][0]["instructions"]
    first = _first_inst(d)
    insts.insert(1, copy.deepcopy(first))
    insts.insert(2, {**copy.deepcopy(first), "dependencies": [[first["name"], "Flow"]]})


def _set(obj, key, value):
    obj[key] = value


def _del(obj, key):
    del obj[key]


@pytest.mark.parametrize("label,mutate,message", BAD_INPUTS, ids=[b[0] for b in BAD_INPUTS])
def test_bad_input_names_file_path_and_problem(tmp_path, label, mutate, message):
    doc = _doc()
    result = mutate(doc)
    text = result if isinstance(result, str) else json.dumps(doc)
    path = tmp_path / "bad.json"
    path.write_text(text)
    with pytest.raises(FormatError) as err:
        bir_json.load(path)
    text = str(err.value)
    assert str(path) in text and message in text
    if label not in ("malformed JSON",):
        assert " at " in text, "the message should carry the JSON path"


def test_error_path_points_at_the_instruction(tmp_path):
    doc = _doc()
    _first_inst(doc)["opcode"] = "Nope"
    with pytest.raises(FormatError) as err:
        bir_json.from_obj(doc, file="k.json")
    assert err.value.where == "functions[0].blocks[0].instructions[0].opcode"


def _mutations(doc):
    """Every (path, container, key) of a JSON document."""
    out = []

    def walk(x, path):
        if isinstance(x, dict):
            for k, v in x.items():
                out.append((x, k))
                walk(v, path + [k])
        elif isinstance(x, list):
            for k, v in enumerate(x):
                out.append((x, k))
                walk(v, path + [k])

    walk(doc, [])
    return out


JUNK = [None, -1, 10**12, 1.5, "", "zz", [], {}, [[1]], True, {"kind": "AffIVKind"}, 2**63, -2**63 - 1, 1e308,
        "inf", "-it3", [[[[[[[[[[]]]]]]]]]], {"kind": "AffExprKind", "c": 2**62, "terms": []}]
EVIDENCE = sorted((Path(__file__).parent / "data" / "bir_json_evidence").glob("*.json"))


def test_mutated_documents_raise_only_format_errors():
    outcomes: Counter[str] = Counter()

    @settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(st.data())
    def mutants(data):
        outcomes[_mutate_and_read(data, _doc())] += 1

    mutants()
    _some_refused_some_read(outcomes)


def test_mutated_evidence_documents_raise_only_format_errors():
    outcomes: Counter[str] = Counter()

    @settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(st.data())
    def mutants(data):
        path = EVIDENCE[data.draw(st.integers(0, len(EVIDENCE) - 1))]
        outcomes[_mutate_and_read(data, json.loads(path.read_text()))] += 1

    mutants()
    _some_refused_some_read(outcomes)


def _some_refused_some_read(outcomes: Counter[str]) -> None:
    """Junk in required places must be refused, junk in unmodelled ones kept: both happen, often."""
    total = sum(outcomes.values())
    assert outcomes["refused"] >= total // 5 and outcomes["read"] >= total // 20, dict(outcomes)


def _mutate_and_read(data, doc) -> str:
    """Mutate ``doc`` and read it: "refused" (a FormatError naming the file) or "read" (it round-trips)."""
    spots = _mutations(doc)
    for _ in range(data.draw(st.integers(1, 3))):
        if not spots:
            break
        container, key = spots[data.draw(st.integers(0, len(spots) - 1))]
        action = data.draw(st.sampled_from(["replace", "delete"]))
        try:
            if action == "delete":
                del container[key]
            else:
                container[key] = copy.deepcopy(JUNK[data.draw(st.integers(0, len(JUNK) - 1))])
        except (IndexError, KeyError):
            pass
        spots = _mutations(doc)
    try:
        m = bir_json.from_obj(doc, file="mutant.json")
    except FormatError as e:
        assert str(e).startswith("mutant.json")
        return "refused"
    assert isinstance(m, Module)
    text = bir_json.dumps(m)  # whatever loads can be written, and reads back the same
    assert bir_json.dumps(bir_json.loads(text)) == text
    try:
        verify(m)
    except VerifyError:
        pass
    return "read"


def test_negative_zero_and_int_float_immediates_stay_distinct():
    b = Builder()
    t = b.sbuf("t", (4, 4), addr=0)
    b.emit("TensorTensor", "DVE", [t.ap(), 0.0], [t.ap()], attrs={"op": "mult"})
    b.emit("TensorTensor", "DVE", [t.ap(), -0.0], [t.ap()], attrs={"op": "mult"})
    b.emit("TensorTensor", "DVE", [t.ap(), 1], [t.ap()], attrs={"op": "mult"})
    b.emit("TensorTensor", "DVE", [t.ap(), 1.0], [t.ap()], attrs={"op": "mult"})
    m = b.module()
    fn = bir_json.loads(bir_json.dumps(m)).functions[0]
    values = [fn.inst(i).ins[1].value for i in range(4)]
    assert [repr(v) for v in values] == ["0.0", "-0.0", "1", "1.0"]


# ---------------------------------------------------------------- hostile input (regressions): nothing but a
# FormatError naming file, JSON path and problem may come out of the reader


def _memloc(d):
    return d["functions"][0]["allocations"][1]["memorylocations"][0]


def _sb_memloc(d):
    for a in d["functions"][0]["allocations"]:
        for m in a.get("memorylocations", []):
            if m.get("type") == "SB":
                return m
    raise AssertionError("no SB memory location")


def _symbolic(d):
    op = copy.deepcopy(_first_inst(d)["outs"][0])
    op.update(kind="symbolic_ap", addrs=[{"kind": "AffExprKind", "c": 0, "terms": []}])
    op.pop("offset", None)
    _first_inst(d)["outs"][0] = op
    return op


def _loop(d):
    for b in d["functions"][0]["blocks"]:
        for i in b["instructions"]:
            if i.get("opcode") == "Loop":
                return i
    raise AssertionError("no loop")


def _nest(depth):
    return "[" * depth + "]" * depth


HOSTILE = [
    ("int64 overflow in dims", lambda d: _set(_memloc(d), "dims", [2**63]), "out of range", "dims[0]"),
    ("int64 overflow in base", lambda d: _set(_sb_memloc(d), "base", 2**63), "out of range", ".base"),
    ("int64 overflow in tensor_id", lambda d: _set(_memloc(d), "tensor_id", 2**63), "out of range", ".tensor_id"),
    ("int64 overflow in tensor_shape", lambda d: _set(d["functions"][0]["allocations"][1], "tensor_shape", [2**63]),
     "out of range", "tensor_shape[0]"),
    ("int64 overflow in ap", lambda d: _set(_first_inst(d)["outs"][0], "ap", [[2**63, 1]]), "out of range", ".ap[0][0]"),
    ("int64 overflow in block_index", lambda d: _set(_symbolic(d), "block_index",
                                                      {"kind": "AffExprKind", "c": 2**63, "terms": []}),
     "out of range", "block_index"),
    ("1e308 for an offset", lambda d: _set(_first_inst(d)["outs"][0], "offset", 1e308), "expected an integer",
     ".offset"),
    ("1e308 for dims", lambda d: _set(_memloc(d), "dims", [1e308]), "expected an integer", "dims[0]"),
    ("deep nesting", lambda d: _set(_first_inst(d), "debug", "@NEST@"), "nested", "instructions[0]"),
    ("deep nesting in an expression", lambda d: _set(_symbolic(d), "addrs", "@NEST@"), "nested", "addrs"),
    ("5000-digit integer", lambda d: _set(_first_inst(d)["outs"][0], "offset", "@DIGITS@"), "malformed JSON", None),
    ("LoopAxis stride zz", lambda d: _set(_loop(d)["LoopAxis"], "stride", "zz"), "must be an integer",
     "LoopAxis.stride"),
    ("reserved key", lambda d: _set(_first_inst(d), "\u0000wire", 1), "reserved", "instructions[0]"),
]


@pytest.mark.parametrize("label,mutate,message,where", HOSTILE, ids=[h[0] for h in HOSTILE])
def test_hostile_input_is_a_format_error(tmp_path, label, mutate, message, where):
    doc = _doc()
    mutate(doc)
    text = json.dumps(doc).replace('"@NEST@"', _nest(100_000)).replace('"@DIGITS@"', "7" * 5000)
    path = tmp_path / "hostile.json"
    path.write_text(text)
    with pytest.raises(FormatError) as err:
        bir_json.load(path)
    assert str(path) in str(err.value) and message in str(err.value)
    # orjson >= 3.9 refuses deep nesting itself (depth 1024), before Tusk's walk could say where
    parser_refused = "malformed JSON" in str(err.value)
    if where and not parser_refused:
        assert where in (err.value.where or ""), err.value.where
