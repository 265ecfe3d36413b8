"""BIR-JSON in every shape the public evidence shows: read, verified, written back losslessly.

The documents in tests/data/bir_json_evidence/ are hand-built from
../shared/specs/bir-json-evidence.md (their README says which source each
follows).  ``save(load(doc))`` must give back every key and value the
document had (key order aside); passes that change a modelled value get it
written in the policy spelling.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import numpy as np
import pytest

from tusk.examples.generate import KERNELS
from tusk.ir import bir_json
from tusk.ir.canonical import canonical_json
from tusk.ir.enums import FnAttr, Kind, Op
from tusk.ir.errors import FormatError, TuskError
from tusk.ir.verify import verify
from tusk.sim.interp import random_inputs, run
from tusk.stages.full_unroll import FullUnroll

EVIDENCE = Path(__file__).parent / "data" / "bir_json_evidence"
DOCS = sorted(p.name for p in EVIDENCE.glob("*.json"))
CORPUS = sorted(p.name for p in KERNELS.glob("*.json"))


def differences(a, b, path="$"):
    """Where two JSON values differ (strictly: 1, 1.0 and true are three values); key order is ignored."""
    if type(a) is not type(b):
        yield f"{path}: {a!r} became {b!r}"
    elif isinstance(a, dict):
        for k in a.keys() | b.keys():
            if k not in b:
                yield f"{path}.{k}: lost"
            elif k not in a:
                yield f"{path}.{k}: added"
            else:
                yield from differences(a[k], b[k], f"{path}.{k}")
    elif isinstance(a, list):
        if len(a) != len(b):
            yield f"{path}: {len(a)} entries became {len(b)}"
        else:
            for k, (x, y) in enumerate(zip(a, b)):
                yield from differences(x, y, f"{path}[{k}]")
    elif canonical_json(a) != canonical_json(b):
        yield f"{path}: {a!r} became {b!r}"


def round_trip(path: Path) -> list[str]:
    doc = json.loads(path.read_text())
    back = json.loads(bir_json.dumps(bir_json.load(path)))
    return list(differences(doc, back))


def test_every_document_has_its_source_in_the_readme():
    readme = (EVIDENCE / "README.md").read_text()
    assert len(DOCS) >= 17
    for name in DOCS:
        assert f"`{name}`" in readme, f"{name} is not described in the README"


@pytest.mark.parametrize("name", DOCS)
def test_evidence_document_loads_verifies_and_round_trips_losslessly(name):
    module = bir_json.load(EVIDENCE / name)
    verify(module)
    assert round_trip(EVIDENCE / name) == []
    again = bir_json.loads(bir_json.dumps(module))
    assert again == module


@pytest.mark.parametrize("name", CORPUS)
def test_corpus_document_round_trips_losslessly(name):
    assert round_trip(KERNELS / name) == []


def test_gzip_in_and_out(tmp_path):
    module = bir_json.load(EVIDENCE / "ds_lower_sync_dynamic_loop.json")
    path = tmp_path / "k.json.gz"
    bir_json.save(module, path)
    assert path.read_bytes()[:2] == b"\x1f\x8b"
    assert bir_json.load(path) == module


def test_repeated_names_resolve_in_their_own_block():
    fn = bir_json.load(EVIDENCE / "d_repeated_names.json").functions[0]
    names = fn.inst_names()
    assert names.count("scf.for-Inc_inst__I-10-0-Pool0") == 2
    blocks = fn.insts["block"]
    for src, dst in zip(fn.deps["src"].tolist(), fn.deps["dst"].tolist()):
        assert blocks[src] == blocks[dst], "a dependency left its block although its block has the name"
    with pytest.raises(TuskError, match="several instructions"):
        fn.inst_by_name("load")


def test_a_reference_to_a_name_repeated_elsewhere_is_ambiguous():
    doc = json.loads((EVIDENCE / "d_repeated_names.json").read_text())
    exit_block = doc["functions"][0]["blocks"][1]["instructions"]
    exit_block[0]["dependencies"] = [["load", "Flow"]]
    with pytest.raises(FormatError) as err:
        bir_json.from_obj(doc, file="f.json")
    text = str(err.value)
    assert "ambiguous dependency 'load'" in text
    assert "functions[0].blocks[0].instructions[1]" in text and "functions[0].blocks[2].instructions[1]" in text


def test_dependency_forms_resolve_to_one_edge_per_pair():
    fn = bir_json.load(EVIDENCE / "spec_dependency_forms.json").functions[0]
    edges = {(fn.inst_name(s), fn.inst_name(d), k) for s, d, k in
             zip(fn.deps["src"].tolist(), fn.deps["dst"].tolist(), fn.deps["kind"].tolist())}
    assert edges == {("a", "b", 4), ("a", "c", 2), ("b", "c", 4), ("d", "e", 3), ("c", "e", 4)}


def test_klr_loop_record_and_names():
    module = bir_json.load(EVIDENCE / "k_loop_record.json")
    fn = module.functions[0]
    loop = int(np.flatnonzero(fn.insts["opcode"] == Op.Loop)[0])
    assert fn.insts["name"][loop] == -1 and fn.inst_name(loop) == ""
    assert {FnAttr.UNROLLABLE, FnAttr.MARKED_TO_UNROLL} <= fn.attrs
    assert (fn.operands["kind"] == Kind.SYMBOLIC_DIMS).sum() == 1
    out, _ = FullUnroll(level=1).run(module)
    verify(out)
    doc = json.loads(bir_json.dumps(out))
    fn_doc = doc["functions"][0]
    names = [i.get("name") for b in fn_doc["blocks"] for i in b["instructions"]]
    assert names.count("noop_test-it0") == 2 and "noop_test-it3" in names
    assert fn_doc["attributes"] == ["need_unroll", "unrolled"]  # the form read, plus what the pass set


def test_attribute_list_keeps_unknown_names_and_its_order():
    module = bir_json.load(EVIDENCE / "g_attributes_list_sunda.json")
    fn = module.functions[0]
    fn.attrs.add(FnAttr.UNROLLED)
    assert json.loads(bir_json.dumps(module))["functions"][0]["attributes"] == ["need_dce", "need_unroll", "unrolled"]
    fn.attrs.discard(FnAttr.MARKED_TO_UNROLL)
    assert json.loads(bir_json.dumps(module))["functions"][0]["attributes"] == ["need_dce", "unrollable", "unrolled"]


def test_a_changed_value_is_written_in_the_policy_spelling():
    module = bir_json.load(EVIDENCE / "k_dram_dims_two_entries.json")
    fn = module.functions[0]
    doc = json.loads(bir_json.dumps(module))
    assert doc["functions"][0]["allocations"][0]["memorylocations"][0]["dims"] == [128, 2048]
    fn.memlocs["pbytes"][0] = 1024
    fn.memlocs["addr"][1] = -1
    doc = json.loads(bir_json.dumps(module))
    dram, sb = (a["memorylocations"][0] for a in doc["functions"][0]["allocations"])
    assert dram["dims"] == [1024]
    assert (sb["addr"], sb["allocated"]) == (0, False)


def test_three_entry_dims_follow_klr_physical_shape():
    fn = bir_json.load(EVIDENCE / "k_dims_three_entries.json").functions[0]
    assert (fn.memlocs["nparts"][0], fn.memlocs["pbytes"][0]) == (128, 4 * 8 * 4)


def test_nonfinite_immediates():
    fn = bir_json.load(EVIDENCE / "k_nonfinite_immediates.json").functions[0]
    values = [fn.operand(j).value for j in range(len(fn.operands)) if fn.operands["kind"][j] == Kind.IMM]
    assert [repr(v) for v in values] == ["-inf", "inf", "nan", "3"]


def test_opaque_opcodes_verify_and_the_interpreter_refuses_them():
    module = bir_json.load(EVIDENCE / "k_opaque_opcodes.json")
    verify(module)
    with pytest.raises(TuskError, match="Shuffle .*KLR.*not supported by the interpreter"):
        run(module, random_inputs(module, seed=1))


def test_register_ap_without_regref_loads_and_the_interpreter_says_why():
    module = bir_json.load(EVIDENCE / "ds_lower_sync_dynamic_loop.json")
    ops = module.functions[0].operands
    assert ((ops["kind"] == Kind.REGISTER_AP) & (ops["aux"] == -1)).sum() == 1


def test_checkers_flat_dumps_keep_queues_and_sync_info():
    module = bir_json.load(EVIDENCE / "ds_lower_sync_dynamic_loop.json")
    assert [q["name"] for q in module.queues] == ["qPoolDynamic"]
    doc = json.loads(bir_json.dumps(module))
    trig = doc["functions"][0]["blocks"][0]["instructions"][1]
    assert trig["dma_blocks"] == ["prologue_gather_block"] and trig["queue"] == "qPoolDynamic"
    assert "sync_info" in trig and "debug" in trig
    assert "arch" not in doc and "version" not in doc  # the document had neither


def test_policy_output_has_what_the_real_dump_tools_read():
    unrolled, _ = FullUnroll(level=1).run(bir_json.load(KERNELS / "tiled_matmul.json"))
    doc = json.loads(bir_json.dumps(unrolled))
    fn = doc["functions"][0]
    assert isinstance(fn["attributes"], list)
    for a in fn["allocations"]:
        assert {"name", "dtype", "kind", "file", "partition_dim", "tensor_class", "tensorId2MemLocSize"} <= set(a)
        for m in a["memorylocations"]:
            assert {"addr", "allocated", "bank", "base", "dims", "tensor_id"} <= set(m)
    insts = [i for b in fn["blocks"] for i in b["instructions"]]
    for i in _walk(insts):
        assert "origin" not in i and "engine_id" not in i and "scheduled_start" not in i
        if i["opcode"] == "DMACopy":
            assert "mode" in i and "queue" in i
        if i["opcode"] == "Matmult":
            assert isinstance(i["start_tensor_calc"], bool) and isinstance(i["stop_tensor_calc"], bool)


def _walk(insts):
    for i in insts:
        yield i
        for b in i.get("blocks", []):
            yield from _walk(b["instructions"])


def test_nameless_allocations_keep_their_place_and_avoid_taken_names():
    doc = json.loads((EVIDENCE / "ds_lower_sync_dynamic_loop.json").read_text())
    allocs = doc["functions"][0]["allocations"]
    allocs[2]["name"] = "staged_gate_up_set"  # the name the first nameless allocation would be given
    module = bir_json.from_obj(copy.deepcopy(doc))
    sets = [module.functions[0].strings[n] for n in module.functions[0].sets["name"].tolist()]
    assert sets[0] == "staged_gate_up_set_" and sets[2] == "staged_gate_up_set"
    assert json.loads(bir_json.dumps(module))["functions"][0]["allocations"] == allocs
