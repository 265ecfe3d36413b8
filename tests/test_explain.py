"""explain_makespan: the binding resource and utilisation of a kernel, as JSON-able data in one unit."""

from __future__ import annotations

import json

import pytest

from tests.programs import tiled_exp_module
from tests.test_timing import TOY, _toy
from tusk.ir.builder import Builder
from tusk.ir.module import Module
from tusk.sim.explain import explain_makespan
from tusk.sim.timing import GHZ, simulate
from tusk.stages.deps import build_fdeps


def _dve_bound():
    b = Builder("main")
    x = b.dram("x", (2, 4), kind="ExternalInput")
    t = b.sbuf("t", (2, 4), addr=0)
    b.dma(t.ap(), x.ap())
    for k in range(12):
        b.memset(b.sbuf(f"u{k}", (2, 4), addr=64 + 64 * k).ap(), float(k), engine="DVE")
    return build_fdeps(b.function())


def test_an_engine_bound_kernel_names_its_engine_and_utilisation():
    fn = _dve_bound()
    out = explain_makespan(fn, TOY)
    json.dumps(out)  # plain data
    tl = simulate(fn, TOY)
    assert out["ok"] and out["unit"] == "cycles" and out["ghz"] == GHZ
    assert out["makespan"]["cycles"] == tl.makespan == 12 * 4
    assert out["makespan"]["us"] == pytest.approx(tl.makespan / (GHZ * 1000))
    assert out["binding"] == {"term": "engine DVE", "kind": "engine", "resource": "DVE", "cycles": 48.0}
    assert out["utilisation"]["DVE"] == 1.0                       # never idle: it is the bottleneck
    assert out["utilisation"]["Activation"] == 0.0
    assert out["utilisation"]["SP.q0"] == pytest.approx(26 / 48)  # the load's slot time
    assert out["efficiency"] == 1.0 and next(iter(out["bounds"])) == "engine DVE"


def test_a_queue_bound_kernel_names_the_queues():
    # the toy's four transfers of 26 cycles share SP's one queue with one slot: 104 cycles, its makespan
    out = explain_makespan(build_fdeps(_toy()), TOY)
    assert out["binding"] == {"term": "DMA queues of SP", "kind": "DMA queues", "resource": "DMA queues of SP",
                              "cycles": 104.0}
    assert out["lower_bound"]["cycles"] == out["makespan"]["cycles"] == 104
    assert out["utilisation"]["SP.q0"] == 1.0 and out["utilisation"]["Activation"] == pytest.approx(18 / 104)


def test_a_host_reports_what_limits_its_kernel():
    kernel = _dve_bound()
    kernel.name = "k"
    b = Builder("main")
    for _ in range(2):
        b.emit("NKIKernel", "Unassigned", attrs={"func": "k", "func_args": {}, "func_outs": {}})
    out = explain_makespan(Module([b.function(), kernel]), TOY)
    json.dumps(out)
    assert out["makespan"]["cycles"] == 2 * 48
    assert out["binding"]["resource"] == "DVE" and out["binding"]["kernel"] == "k"
    assert out["utilisation"]["DVE"] == 1.0  # the kernels' busy time counts over the host's makespan
    (k,) = out["kernels"]
    assert k["function"] == "k" and k["calls"] == 2 and k["makespan"]["cycles"] == 48


def test_a_function_the_model_cannot_time_gives_the_reason():
    out = explain_makespan(tiled_exp_module())
    assert out == {"ok": False, "function": "main", "why": out["why"]} and "not straight-line" in out["why"]


def test_a_build_records_what_limits_each_kernel_in_stats_json_and_json_output(tmp_path):
    """stats.json (and --json, which prints it) carry explain_makespan per timed module, and the unit summary
    the final module's lower bound, binding resource and utilisation, in cycles; a rebuild reads them back."""
    from tests.test_workflow_timings import EXAMPLES, build

    kdir = tmp_path / "k"
    kdir.mkdir()
    for name in ("tiled_exp.json", "rmsnorm.klr"):
        (kdir / name).write_bytes((EXAMPLES / name).read_bytes())
    for _ in range(2):  # built, then from the store
        build(kdir, tmp_path / "o", tmp_path / "cache")
        for kernel in ("tiled_exp", "rmsnorm"):
            data = json.loads((tmp_path / "o" / kernel / "stats.json").read_text())
            unit = data["units"][0]
            summary, after = unit["summary"], unit["timings"][-1]
            assert summary["unit"] == "cycles" and summary["binding"]["kind"] in (
                "engine", "DMA queues", "DRAM", "DMA engines", "dependence chain", "kernel calls")
            assert summary["lower_bound"] <= summary["makespan_after"] * (1 + 1e-9)
            assert set(summary["utilisation"]) >= {"PE", "Activation", "Pool", "DVE", "SP"}
            assert all(0.0 <= v <= 1.0 + 1e-9 for v in summary["utilisation"].values())
            assert after["explain"]["makespan"]["cycles"] == pytest.approx(after["makespan"])
