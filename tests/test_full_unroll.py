"""FullUnroll levels and ceiling, HeuristicUnroll, and the full_unroll command."""

from __future__ import annotations

import logging
import os
import subprocess
import sys

import numpy as np
import pytest

from tests.programs import every_family_module, tiled_exp_module
from tusk.ir import bir_json
from tusk.ir.builder import Builder
from tusk.ir.enums import FnAttr, Op
from tusk.ir.errors import PassError
from tusk.ir.verify import verify
from tusk.sim.interp import random_inputs, run, same_outputs
from tusk.stages.full_unroll import CEILING, FullUnroll, instruction_limit_check
from tusk.stages.heuristic_unroll import HeuristicUnroll
from tusk.workflows.blas_threads import VARIABLES
from tusk.workflows.full_unroll_cli import main as full_unroll_main


def full(m, level):
    out, stats = FullUnroll(level=level).run(m)
    verify(out)
    return out, stats


def test_level_must_be_set():
    with pytest.raises(PassError, match="Need to set full_unroll level, 0: only memloc generation; 1: unroll some; "
                                        "2: unroll all"):
        FullUnroll().run(tiled_exp_module())


def test_ceiling_boundary_24999999_passes_25000000_fails():
    instruction_limit_check(24_999_999)
    with pytest.raises(PassError, match="Compiler generated too many instructions, this may due to a failure in "
                                        "parallelism extraction by the tensorizer !"):
        instruction_limit_check(25_000_000)
    assert CEILING == 25_000_000


def test_ceiling_fails_fast_on_a_real_pass_without_building_the_clones(monkeypatch):
    import tusk.stages.unroll

    def no_expansion(*a, **k):
        raise AssertionError("the clones were being built: the count must come from trip counts")

    monkeypatch.setattr(tusk.stages.unroll, "plan_function", no_expansion)
    b = Builder()
    t = b.sbuf("t", (128, 4), addr=0)
    y = b.dram("y", (128, 4), kind="ExternalOutput")
    with b.loop("i", 0, 5000):
        with b.loop("j", 0, 5000):
            b.dma(y.ap(), t.ap())  # writes an output: DCE could never remove a clone
    with pytest.raises(PassError, match="total_count=25000000"):
        FullUnroll(level=2).run(b.module())


def _marked(tiled, attrs):
    tiled.functions[0].attrs |= set(attrs)
    return tiled


def test_level1_gating_and_log_lines(caplog):
    caplog.set_level(logging.INFO)
    out, st = full(_marked(tiled_exp_module(), {FnAttr.UNROLLABLE, FnAttr.MARKED_TO_UNROLL}), 1)
    assert st["unrolled_functions"] == 1 and not (out.functions[0].insts["opcode"] == Op.Loop).any()
    assert "INFO (FullUnroll) DONE unrolling" in caplog.text
    caplog.clear()
    out, st = full(_marked(tiled_exp_module(), {FnAttr.UNROLLABLE}), 1)
    assert st["unrolled_functions"] == 0 and (out.functions[0].insts["opcode"] == Op.Loop).any()
    assert "DONE DCE, no unrolling needed, running BirCodeGen with unroll pass" in caplog.text
    caplog.clear()
    out, st = full(tiled_exp_module(), 1)
    assert st["unrolled_functions"] == 0
    assert "No unrolling needed, running hhir pass" in caplog.text


def test_level2_unrolls_everything_erases_dependencies_and_keeps_meaning():
    m = every_family_module()
    out, st = full(m, 2)
    fn = out.functions[0]
    assert not np.isin(fn.insts["opcode"], [Op.Loop]).any()
    assert len(fn.deps) == 0 and len(fn.carried) == 0
    assert st["dce_removed"] == 1  # the block written in iteration 0 is read only by a predicated-off clone
    inputs = random_inputs(m, 1)
    assert same_outputs(run(m, inputs), run(out, inputs))


def test_level0_generates_sub_memlocs_for_a_single_memloc_block_tensor():
    b = Builder()
    y = b.dram("y", (128, 4), kind="ExternalOutput")
    t = b.sbuf("t", (128, 4), addr=0)
    with b.loop("i", 0, 2):
        b.memset(t.ap(), 3.0)
    b.dma(y.ap(), t.ap())
    m = b.module()
    fn = m.functions[0]
    fn.sets.set("is_block", 0 + fn.set_by_name("t_set"), 1)
    fn.sets.set("n_blocks", fn.set_by_name("t_set"), 3)
    out, st = full(m, 0)
    names = [out.functions[0].strings[n] for n in out.functions[0].memlocs["name"].tolist()]
    assert st["sets_split"] == 1
    assert [n for n in names if n.startswith("t_set_sub")] == ["t_set_sub0", "t_set_sub1", "t_set_sub2"]
    assert (out.functions[0].insts["opcode"] == Op.Loop).any(), "level 0 does not unroll"
    inputs = random_inputs(m, 0)
    assert same_outputs(run(m, inputs), run(out, inputs))


def test_heuristic_marks_innermost_static_loops_and_maxhu_caps(monkeypatch, caplog):
    caplog.set_level(logging.INFO)
    b = Builder()
    t = b.sbuf("t", (128, 4), addr=0)
    for name in ("a", "b", "c"):
        with b.loop(name, 0, 2):
            with b.loop(name + "_in", 0, 2, name=f"inner_{name}"):
                b.memset(t.ap(), 0)
    m = b.module()
    out, st = HeuristicUnroll().run(m)
    marked = [out.functions[0].inst_name(r) for r in range(out.functions[0].n_insts)
              if out.functions[0].inst(r).attrs.get("unroll")]
    assert marked == ["inner_a", "inner_b", "inner_c"]
    assert "Heuristically unrolled 3 loops." in caplog.text
    out, st = HeuristicUnroll(maxhu=2).run(m)
    assert st["marked"] == 2 and st["eligible"] == 3
    monkeypatch.setenv("MAXHU", "1")  # the pass never reads the environment (the CLI does, once)
    out, st = HeuristicUnroll().run(m)
    assert st["marked"] == 3
    out, st = HeuristicUnroll(maxhu=1).run(m)
    assert st["marked"] == 1
    caplog.clear()
    HeuristicUnroll(enabled=False).run(m)
    assert "Heuristic unroll is off." in caplog.text


def test_heuristic_skips_loops_with_runtime_addresses():
    b = Builder()
    x = b.dram("x", (1024, 4), kind="ExternalInput")
    t = b.sbuf("t", (128, 4), addr=0)
    from tusk.ir.expr import runtime

    r = b.register("r")
    b.register_move(r, 0)
    with b.loop("i", 0, 2) as i:
        b.dma(t.ap(), x.tile(runtime("r") + i, 128, 0, 4))
    _, st = HeuristicUnroll().run(b.module())
    assert st["eligible"] == 0


def test_full_unroll_command_mirrors_the_binary(tmp_path):
    src = tmp_path / "in.json"
    dst = tmp_path / "out.json"
    m = _marked(tiled_exp_module(), {FnAttr.UNROLLABLE, FnAttr.MARKED_TO_UNROLL})
    bir_json.save(m, src)
    assert full_unroll_main([str(src), "-o", str(dst), "-unrollLevel", "2", "-verbose", "20"]) == 0
    out = bir_json.load(dst)
    assert out.functions[0].n_insts == 12
    # default level 0: memloc generation only, loops stay
    assert full_unroll_main([str(src), "-o", str(dst)]) == 0
    assert (bir_json.load(dst).functions[0].insts["opcode"] == Op.Loop).any()
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    proc = subprocess.run([sys.executable, "-m", "tusk.workflows.full_unroll_cli", str(bad), "-o", str(dst)],
                          capture_output=True, text=True)
    assert proc.returncode != 0 and "malformed JSON" in proc.stderr


def test_dce_keeps_writes_to_blocks_read_symbolically_and_to_buffers_overlapping_outputs():
    b = Builder()
    x = b.dram("x", (128, 4), kind="ExternalInput")
    y = b.dram("y", (128, 4), kind="ExternalOutput")
    ring = b.sbuf("ring", (128, 4), addr=0, blocks=2)
    with b.loop("i", 0, 2) as i:
        b.dma(ring.ap(block=i), x.ap())
    b.dma(y.ap(), ring.ap(block=1))
    m = b.module()
    out, _ = full(m, 0)  # level 0 keeps the loop: the reads stay symbolic
    inputs = random_inputs(m, 0)
    assert same_outputs(run(m, inputs), run(out, inputs))
    b = Builder()
    x = b.dram("x", (4, 4), kind="ExternalInput")
    y = b.dram("y", (4, 4), kind="ExternalOutput", addr=0)
    t = b.dram("t", (4, 4), addr=0)  # an internal buffer placed on top of the output
    b.dma(t.ap(), x.ap())
    m = b.module()
    out, st = full(m, 2)
    assert st["dce_removed"] == 0
    inputs = random_inputs(m, 0)
    assert same_outputs(run(m, inputs), run(out, inputs))


def test_heuristic_unroll_only_marks_the_program_means_the_same():
    m = every_family_module()
    out, st = HeuristicUnroll().run(m)
    verify(out)
    assert st["marked"] >= 1
    inputs = random_inputs(m, 2)
    assert same_outputs(run(m, inputs), run(out, inputs))


def test_the_command_imports_only_what_it_needs(tmp_path):
    """full_unroll's start-up is part of its run time: no random numbers, no psutil, no package metadata,
    nothing of the build system; and it still unrolls the file."""
    src, out = tmp_path / "in.json", tmp_path / "out.json"
    bir_json.save(tiled_exp_module(tiles=3), src)
    heavy = ("numpy.random", "psutil", "importlib.metadata", "dask", "distributed", "zarr", "typer", "rich",
             "plotly", "tusk.workflows.graph", "tusk.sim", "numpy.ma")
    code = ("import sys\nfrom tusk.workflows.full_unroll_cli import main\n"
            f"rc = main([{str(src)!r}, '-o', {str(out)!r}, '-unrollLevel', '2'])\n"
            f"print(rc, [m for m in {heavy!r} if m in sys.modules])")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert proc.stdout.split("\n")[0] == "0 []", proc.stdout + proc.stderr
    assert bir_json.load(out).n_insts() > bir_json.load(src).n_insts()


def _numpy_threads(env_value: str | None) -> int:
    """Threads of a fresh process that imports numpy after the entry points' BLAS setting."""
    env = {k: v for k, v in os.environ.items() if k not in VARIABLES}
    if env_value is not None:
        env["OPENBLAS_NUM_THREADS"] = env_value
    code = ("import os\nfrom tusk.workflows.blas_threads import one_blas_thread\none_blas_thread()\n"
            "import numpy\nprint(len(os.listdir('/proc/self/task')))")
    return int(subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                              check=True).stdout)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="counts threads in /proc")
def test_entry_points_start_numpy_with_one_blas_thread_unless_the_user_says_otherwise():
    assert _numpy_threads(None) == 1
    cpus = os.cpu_count() or 1
    if cpus > 1:
        assert _numpy_threads(str(cpus)) > 1  # the user's setting wins


def test_the_console_command_exits_with_mains_code_after_writing_everything(tmp_path):
    """``command`` leaves with os._exit: the output must be whole and the exit code main's."""
    src, out, bad = tmp_path / "in.json", tmp_path / "out.json", tmp_path / "bad.json"
    bir_json.save(tiled_exp_module(tiles=3), src)
    bad.write_text('{"functions": [')
    ok = subprocess.run([sys.executable, "-m", "tusk.workflows.full_unroll_cli", str(src), "-o", str(out),
                         "-unrollLevel", "2", "-verbose", "20"], capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    assert "wrote" in ok.stderr  # the log line made it out before the process ended
    expected = tmp_path / "expected.json"
    assert full_unroll_main([str(src), "-o", str(expected), "-unrollLevel", "2"]) == 0
    assert out.read_bytes() == expected.read_bytes()
    failed = subprocess.run([sys.executable, "-m", "tusk.workflows.full_unroll_cli", str(bad), "-o",
                             str(tmp_path / "never.json")], capture_output=True, text=True)
    assert failed.returncode == 1 and "bad.json" in failed.stderr
    assert not (tmp_path / "never.json").exists()


def test_an_output_directory_that_does_not_exist_is_a_clear_error_not_a_traceback(tmp_path, capsys):
    src = tmp_path / "in.json"
    bir_json.save(tiled_exp_module(tiles=3), src)
    target = tmp_path / "missing" / "out.json"
    assert full_unroll_main([str(src), "-o", str(target), "-unrollLevel", "2"]) == 2
    err = capsys.readouterr().err
    assert f"full_unroll: error: {target}: cannot write" in err and "Traceback" not in err
    assert not (tmp_path / "missing").exists()
