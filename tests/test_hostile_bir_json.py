"""Hostile BIR-JSON kernels (issue 22, items 1 and 5): refused by the reader as the kernel's fault, with the
file, the memory location and the field named; the good kernels beside them are still written."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.test_reliability import clean_env  # noqa: F401 - autouse: no TUSK_* from the caller, a private cache
from tusk.ir import bir_json
from tusk.ir.errors import FormatError
from tusk.workflows.cli import app

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "kernels"
runner = CliRunner()


def _doc(name: str) -> dict:
    return json.loads((EXAMPLES / name).read_text())


def _set(doc: dict, set_name: str) -> dict:
    (s,) = [a for a in doc["functions"][0]["allocations"] if a.get("name") == set_name]
    return s


def huge_sizes() -> dict:
    """Each value in range on its own; the tensor's bytes (a product) past int64."""
    doc = _doc("tiled_exp.json")
    x = _set(doc, "x_set")
    x["tensor_shape"] = [1099511627776, 1099511627776]
    x["memorylocations"][0]["dims"] = [4611686018427387904]
    return doc


def huge_dims() -> dict:
    """An SB location whose partitions times bytes per partition pass 2^62."""
    doc = _doc("tiled_exp.json")
    _set(doc, "t_set")["memorylocations"][0]["dims"] = [128, 1 << 60]
    return doc


def huge_end() -> dict:
    """addr and dims each in range, their sum (the location's end) past 2^62."""
    doc = _doc("tiled_exp.json")
    loc = _set(doc, "t_set")["memorylocations"][0]
    loc["dims"], loc["addr"] = [1, 1 << 61], (1 << 62) - 8
    return doc


def huge_band() -> dict:
    """base and the partition count each in int32, their sum not."""
    doc = _doc("tiled_exp.json")
    loc = _set(doc, "t_set")["memorylocations"][0]
    loc["dims"], loc["base"] = [(1 << 31) - 1, 2048], 5
    return doc


SIZE_CASES = {"huge_sizes": (huge_sizes, "x_set", "allocations[0].tensor_shape"),
              "huge_dims": (huge_dims, "'t'", "allocations[2].memorylocations[0].dims"),
              "huge_end": (huge_end, "'t'", "allocations[2].memorylocations[0].addr"),
              "huge_band": (huge_band, "'t'", "allocations[2].memorylocations[0].base")}


@pytest.mark.parametrize("case", sorted(SIZE_CASES))
@pytest.mark.parametrize("fast", [False, True])
def test_the_reader_refuses_sizes_whose_products_or_sums_pass_their_columns(tmp_path, case, fast):
    make, what, field = SIZE_CASES[case]
    path = tmp_path / f"{case}.json"
    path.write_text(json.dumps(make()))
    with pytest.raises(FormatError) as e:
        bir_json.load(path, fast=fast)
    text = str(e.value)
    assert str(path) in text and what in text and field in text, text


def _compile(kdir: Path, out: Path) -> tuple[int, str]:
    res = runner.invoke(app, ["compile", str(kdir), "-o", str(out), "--workers", "0"])
    assert res.exception is None or isinstance(res.exception, SystemExit), res.output
    return res.exit_code, " ".join(res.output.split())


def test_a_kernel_with_sizes_past_int64_fails_alone_and_the_good_ones_are_written(tmp_path):
    k = tmp_path / "k"
    k.mkdir()
    for good in ("tiled_exp.json", "tiled_add.json"):
        shutil.copy(EXAMPLES / good, k / good)
    (k / "bomb.json").write_text(json.dumps(huge_sizes()))
    out = tmp_path / "out"
    code, text = _compile(k, out)
    assert code == 1, text
    assert "Traceback" not in text and "OverflowError" not in text and "internal error" not in text, text
    assert "bomb.json" in text and "tensor_shape" in text and "x_set" in text, text
    for good in ("tiled_exp", "tiled_add"):
        assert (out / good / f"{good}.bir.json").is_file(), text
    assert not (out / "bomb").exists()


# --------------------------------------------------------------------------- item 5: a location of 0 elements


def zero_elements(dims: list[int]) -> dict:
    """tiled_add with one more SB location, unused, that holds 0 elements."""
    doc = _doc("tiled_add.json")
    allocs = doc["functions"][0]["allocations"]
    empty = json.loads(json.dumps(_set(doc, "tb_set")))
    empty["name"] = "empty_set"
    loc = empty["memorylocations"][0]
    loc["name"], loc["addr"], loc["dims"] = "empty", 8192, dims
    allocs.append(empty)
    return doc


@pytest.mark.parametrize("dims", [[128, 0], [0, 1024], []])
def test_the_reader_refuses_a_memory_location_of_zero_elements(tmp_path, dims):
    path = tmp_path / "zero.json"
    path.write_text(json.dumps(zero_elements(dims)))
    with pytest.raises(FormatError) as e:
        bir_json.load(path)
    text = str(e.value)
    assert str(path) in text and "'empty'" in text and "0 elements" in text and ".dims" in text, text


def test_a_kernel_with_a_zero_element_location_fails_as_its_own_fault_beside_a_good_one(tmp_path):
    k = tmp_path / "k"
    k.mkdir()
    shutil.copy(EXAMPLES / "tiled_exp.json", k / "tiled_exp.json")
    (k / "zero.json").write_text(json.dumps(zero_elements([128, 0])))
    out = tmp_path / "out"
    code, text = _compile(k, out)
    assert code == 1, text
    assert "zero.json" in text and "'empty'" in text and "0 elements" in text, text
    assert "internal error" not in text and "Traceback" not in text, text
    assert (out / "tiled_exp" / "tiled_exp.bir.json").is_file(), text


# --------------------------------------------------------------------------- item 5: a location placed onto another


def placed_onto(addr: int) -> dict:
    """tiled_add with tb placed at ``addr``: onto ta (addr 0, 1024 bytes) while both hold the add's inputs."""
    doc = _doc("tiled_add.json")
    _set(doc, "tb_set")["memorylocations"][0]["addr"] = addr
    return doc


@pytest.mark.parametrize("addr", [0, 512])
def test_a_location_placed_onto_a_live_one_is_the_kernels_fault_naming_file_and_locations(tmp_path, addr):
    k = tmp_path / "k"
    k.mkdir()
    shutil.copy(EXAMPLES / "tiled_exp.json", k / "tiled_exp.json")
    (k / "over.json").write_text(json.dumps(placed_onto(addr)))
    out = tmp_path / "out"
    code, text = _compile(k, out)
    assert code == 1, text
    flat = " ".join(text.split())
    assert "over.json" in flat and "ta and tb overlap while both are live" in flat, text
    assert "internal error" not in flat and "please report" not in flat and "Traceback" not in flat, text
    assert (out / "tiled_exp" / "tiled_exp.bir.json").is_file() and not (out / "over").exists(), text
    res = runner.invoke(app, ["compile", str(k), "-o", str(out), "--workers", "0", "--json", "--progress", "off"])
    failed = json.loads(res.stdout)["failed"]
    assert [f["fault"] for f in failed] == ["input"], failed  # again, from the cache: still the kernel's fault


def test_reusing_the_bytes_of_a_location_no_longer_live_is_still_fine(tmp_path):
    doc = _doc("tiled_add.json")
    _set(doc, "tc_set")["memorylocations"][0]["addr"] = 0  # the sum over ta: ta is last read where tc is written
    k = tmp_path / "k"
    k.mkdir()
    (k / "reuse.json").write_text(json.dumps(doc))
    code, text = _compile(k, tmp_path / "out")
    assert code == 0, text


# --------------------------------------------------------------------------- on-chip dims resized under their accesses


def _onchip_dims_enlarged() -> tuple[str, bytes]:
    """fault_suite's ``sum_of_onchip_sizes``: every SB location of tiled_rmsnorm at dims [128, 2^15], its
    access patterns unchanged (each location still fits a partition; together they overlap while live)."""
    from tests import fault_suite as fs

    [(name, data)] = fs.bir_product_mutations(names=("sum_of_onchip_sizes",), kernels=("tiled_rmsnorm.json",))
    return name, data


def test_onchip_dims_resized_under_their_patterns_are_refused_by_the_read_step(tmp_path):
    # was refused only after both address_rotation_sb runs (74 s, 61 s CPU) by the unrolled live-overlap check
    name, data = _onchip_dims_enlarged()
    k = tmp_path / "k"
    k.mkdir()
    (k / name).write_bytes(data)
    res = runner.invoke(app, ["compile", str(k), "-o", str(tmp_path / "out"), "--workers", "0", "--json",
                              "--progress", "off"])
    assert res.exit_code == 1, res.output
    rep = json.loads(res.stdout)
    [failed] = rep["failed"]
    assert failed["fault"] == "input" and name in failed["error"], failed
    assert "memory location xt" in failed["error"] and "dims [128, 32768]" in failed["error"], failed
    [unit] = rep["kernels"][0]["units"]
    assert [s["name"] for s in unit["steps"] if s["status"] == "failed"] == ["translate_nki_ast_to_bir"], unit
    assert unit["executed"] == 0, unit  # no pass after the read ran


def test_the_check_of_resized_onchip_dims_is_cheap():
    from tusk.ir.errors import VerifyError
    from tusk.ir.verify import verify

    name, data = _onchip_dims_enlarged()
    t0 = time.process_time()
    with pytest.raises(VerifyError, match="no pair steps whole partitions"):
        verify(bir_json.loads(data, file=name))
    assert time.process_time() - t0 < 1.0


def test_an_unplaced_location_larger_than_a_partition_is_refused():
    from tusk.ir.errors import VerifyError
    from tusk.ir.verify import verify

    doc = _doc("tiled_rmsnorm.json")
    _set(doc, "ss_set")["memorylocations"][0].update(allocated=False, dims=[128, 300_000])
    with pytest.raises(VerifyError, match="SB memory location ss holds 300000 bytes per partition, more than"):
        verify(bir_json.loads(json.dumps(doc)))
    verify(bir_json.loads((EXAMPLES / "tiled_rmsnorm.json").read_bytes()))  # the kernel as shipped passes
