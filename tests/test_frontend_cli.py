"""NKI kernels in Python from the command line: `tusk trace`, and `tusk compile` of tusk.toml [kernels.X].

Tracing runs the kernel's Python in a child process of the build (tusk.workflows.trace_child; CliRunner, --workers 0).
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tusk.ir.klr.magic import is_klr_bytes
from tusk.workflows.cli import app

KLR = Path(__file__).parent / "data" / "klr"
INPUTS = ["f32[128,512]", "f32[128,512]"]

ADD = '''\
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl


@nki.jit
def add(a, b):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    ta = nl.load(a)
    tb = nl.load(b)
    nl.store(out, value=nl.add(ta, tb))
    return out
'''

RAISES = '''\
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl


@nki.jit
def broken(a, b):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    raise ValueError("the kernel gave up")
'''
RAISES_LINE = 8

runner = CliRunner()


def invoke(*args: str):
    res = runner.invoke(app, [str(a) for a in args])
    assert res.exception is None or isinstance(res.exception, SystemExit), res.output
    assert "Traceback" not in res.output
    return res


@pytest.fixture
def cache(tmp_path, monkeypatch):
    d = tmp_path / "cache"
    monkeypatch.setenv("TUSK_CACHE_DIR", str(d))
    return d


def trace_args(target, *extra, inputs=INPUTS):
    return ["trace", str(target), *[a for i in inputs for a in ("--input", i)], *extra]


# ====================================================================== tusk trace


def test_trace_writes_a_klr_file_that_show_lists(tmp_path, cache):
    (tmp_path / "add.py").write_text(ADD)
    out = tmp_path / "kernel.klr"
    res = invoke(*trace_args(f"{tmp_path / 'add.py'}::add", "-o", out))
    assert res.exit_code == 0, res.output
    assert is_klr_bytes(out.read_bytes()[:4])
    assert str(out) in res.stdout
    shown = invoke("show", out)
    assert shown.exit_code == 0, shown.output
    assert shown.stdout.strip()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_trace_without_a_function_and_without_o_writes_function_klr_here(tmp_path, cache, monkeypatch):
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "add.py").write_text(ADD)
    monkeypatch.chdir(tmp_path)
    res = invoke(*trace_args("src/add.py"))
    assert res.exit_code == 0, res.output
    assert is_klr_bytes((tmp_path / "add.klr").read_bytes()[:4])
    res = invoke(*trace_args("src/add.py::add", "--name", "tensor_add"))
    assert res.exit_code == 0, res.output
    assert (tmp_path / "tensor_add.klr").is_file()


IN_A_CLASS = '''\
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl


class Ops:
    @staticmethod
    @nki.jit
    def add(a, b):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=nl.add(nl.load(a), nl.load(b)))
        return out
'''


def test_trace_names_a_kernel_that_is_a_static_method_as_class_dot_name(tmp_path, cache):
    (tmp_path / "ops.py").write_text(IN_A_CLASS)
    out = tmp_path / "k.klr"
    res = invoke(*trace_args(f"{tmp_path / 'ops.py'}::Ops.add", "-o", out))
    assert res.exit_code == 0, res.output
    assert is_klr_bytes(out.read_bytes()[:4])
    res = invoke(*trace_args(f"{tmp_path / 'ops.py'}::Ops.nope", "-o", out))
    assert res.exit_code != 0 and "no function 'Ops.nope'" in res.output


@pytest.mark.parametrize("extra, inputs, needle", [
    ((), ["f33[128,512]", "f32[128,512]"], "f33"),
    ((), ["f32[128,0]", "f32[128,512]"], "f32[128,0]"),
    ((), ["f32(128)", "f32[128,512]"], "f32(128)"),
    ((), ["f32[" + "9" * 5000 + "]", "f32[128,512]"], "more than 18 digits"),  # int() itself raises past 4300
    ((), ["f32[12 8]", "f32[128,512]"], "separated by commas"),
    (("--grid", "2,x"), INPUTS, "--grid"),
    (("--grid", "0"), INPUTS, "--grid"),
    (("--arg", "eps"), INPUTS, "--arg 'eps': expected NAME=VALUE"),
    (("--arg", "eps=1", "--arg", "eps=2"), INPUTS, "--arg eps is given twice"),
])
def test_trace_usage_errors_exit_2_and_write_nothing(tmp_path, cache, extra, inputs, needle, monkeypatch):
    (tmp_path / "add.py").write_text(ADD)
    monkeypatch.chdir(tmp_path)
    res = invoke(*trace_args("add.py::add", *extra, inputs=inputs))
    assert res.exit_code == 2, res.output
    assert res.stderr.startswith("error:") and needle in res.stderr
    assert sorted(p.name for p in tmp_path.iterdir() if p.name != "cache") == ["add.py"]


def test_trace_missing_file_is_refused(tmp_path, cache, monkeypatch):
    monkeypatch.chdir(tmp_path)
    res = invoke(*trace_args("nosuch.py::add"))
    assert res.exit_code == 2 and "nosuch.py" in res.stderr and "no such file" in res.stderr
    assert not list(tmp_path.glob("*.klr"))


def test_trace_unknown_function_exits_1_and_writes_nothing(tmp_path, cache, monkeypatch):
    (tmp_path / "add.py").write_text(ADD)
    monkeypatch.chdir(tmp_path)
    res = invoke(*trace_args("add.py::nosuch", "-o", "k.klr"))
    assert res.exit_code == 1, res.output
    assert "nosuch" in res.stderr
    assert sorted(p.name for p in tmp_path.iterdir() if p.name != "cache") == ["add.py"]


def test_trace_kernel_raising_exits_1_with_file_and_line_and_writes_nothing(tmp_path, cache, monkeypatch):
    (tmp_path / "broken.py").write_text(RAISES)
    monkeypatch.chdir(tmp_path)
    res = invoke(*trace_args("broken.py::broken", "-o", "k.klr"))
    assert res.exit_code == 1, res.output
    assert f"broken.py:{RAISES_LINE}" in res.stderr and "the kernel gave up" in res.stderr
    assert sorted(p.name for p in tmp_path.iterdir() if p.name != "cache") == ["broken.py"]


# ====================================================================== tusk.toml [kernels.X]


def toml_kernel(name="tadd", file="add.py", inputs=INPUTS, **more) -> str:
    lines = [f"[kernels.{name}]", f"file = {json.dumps(file)}", f"inputs = {json.dumps(inputs)}"]
    lines += [f"{k} = {_toml(v)}" for k, v in more.items()]
    return "\n".join(lines) + "\n"


def _toml(v) -> str:
    """A TOML value (an inline table for a dict; JSON spells the rest as TOML does)."""
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k} = {_toml(x)}" for k, x in v.items()) + "}"
    return json.dumps(v)


@pytest.mark.parametrize("toml, key", [
    (toml_kernel(colour="red"), "colour"),
    (toml_kernel(file=3), "kernels.tadd.file"),
    (toml_kernel(file="../outside.py"), "kernels.tadd.file"),
    (toml_kernel(file="/etc/passwd.py"), "kernels.tadd.file"),
    (toml_kernel(file="missing.py"), "kernels.tadd.file"),
    (toml_kernel(file="notes.txt"), "kernels.tadd.file"),
    (toml_kernel(inputs="f32[128,512]"), "kernels.tadd.inputs"),
    (toml_kernel(inputs=[128]), "kernels.tadd.inputs[0]"),
    (toml_kernel(inputs=["f32[128,512]", "f99[1]"]), "kernels.tadd.inputs[1]"),
    (toml_kernel(inputs=["f32[128,512]", "f32[" + "7" * 5000 + "]"]), "kernels.tadd.inputs[1]"),
    ('[kernels.tadd]\nfile = "add.py"\n', "kernels.tadd.inputs"),
    (toml_kernel(grid="2"), "kernels.tadd.grid"),
    (toml_kernel(grid=[2, 0]), "kernels.tadd.grid"),
    (toml_kernel(grid=[True]), "kernels.tadd.grid"),
    (toml_kernel(function=3), "kernels.tadd.function"),
    (toml_kernel(function="not a name"), "kernels.tadd.function"),
    (toml_kernel(args=[1]), "kernels.tadd.args"),
    (toml_kernel(args={"eps": {"a": 1}}), "kernels.tadd.args.eps"),
    (toml_kernel(name="other"), "kernels.other"),  # other.klr is a kernel file of the directory
    ('kernels = 3\n', "kernels"),
    ('[kernels]\ntadd = 3\n', "kernels.tadd"),
])
def test_bad_kernels_tables_are_refused_before_anything_runs(tmp_path, cache, toml, key):
    k = tmp_path / "k"
    k.mkdir()
    (k / "add.py").write_text(ADD + '\nopen(__file__ + ".ran", "w").close()\n')
    (k / "notes.txt").write_text("x")
    (tmp_path / "outside.py").write_text(ADD)
    shutil.copy(KLR / "01_dma_copy.klr", k / "other.klr")
    (k / "tusk.toml").write_text(toml)
    out = tmp_path / "out"
    res = invoke("compile", k, "-o", out, "--workers", "0")
    assert res.exit_code == 2, res.output
    assert "tusk.toml" in res.stderr and key in res.stderr, res.stderr
    assert not out.exists()
    assert not (k / "add.py.ran").exists()


def compile_json(k: Path, out: Path):
    res = invoke("compile", k, "-o", out, "--workers", "0", "--json")
    return res.exit_code, json.loads(res.stdout)


def kernel(report: dict, name: str) -> dict:
    return next(k for k in report["kernels"] if k["kernel"] == name)


def executed(report: dict, name: str) -> int:
    return sum(u["executed"] for u in kernel(report, name).get("units", []))


@pytest.fixture
def project(tmp_path, cache):
    """A kernel directory: a .klr kernel, a Python kernel tusk.toml names, a stray .py it does not."""
    k = tmp_path / "k"
    k.mkdir()
    shutil.copy(KLR / "01_dma_copy.klr", k / "other.klr")
    (k / "add.py").write_text(ADD)
    (k / "stray.py").write_text(f"open({str(tmp_path / 'STRAY_RAN')!r}, 'w').close()\n")
    (k / "tusk.toml").write_text(toml_kernel())
    return {"k": k, "out": tmp_path / "out", "marker": tmp_path / "STRAY_RAN"}


def test_compile_traces_the_named_kernel_and_never_runs_a_stray_py(project):
    code, rep = compile_json(project["k"], project["out"])
    assert code == 0, rep
    assert rep["traced"] == 1 and rep["trace_cached"] == 0
    assert kernel(rep, "tadd")["status"] == "written" and kernel(rep, "other")["status"] == "written"
    assert not project["marker"].exists()
    skipped = {Path(s["path"]).name for s in rep["skipped"]}
    assert "stray.py" in skipped and "add.py" not in skipped
    d = project["out"] / "tadd"
    assert is_klr_bytes((d / "tadd.klr").read_bytes()[:4]) and (d / "tadd.bir.json").is_file()
    stats = json.loads((d / "stats.json").read_text())
    assert stats["source"] == str((project["k"] / "add.py").resolve())
    assert stats["trace"]["status"] == "executed" and stats["trace"]["inputs"] == ["float32[128,512]"] * 2
    assert invoke("show", d / "tadd.klr").exit_code == 0
    assert not [p for p in project["out"].iterdir() if p.name.startswith(".")]


def test_a_directory_with_only_a_stray_py_has_no_kernels_and_runs_nothing(tmp_path, cache):
    k = tmp_path / "k"
    k.mkdir()
    (k / "stray.py").write_text(f"open({str(tmp_path / 'STRAY_RAN')!r}, 'w').close()\n")
    res = invoke("compile", k, "-o", tmp_path / "out", "--workers", "0")
    assert res.exit_code == 1 and "no kernel files" in res.stderr
    assert not (tmp_path / "STRAY_RAN").exists()


def test_rebuild_runs_no_pass_and_no_trace(project):
    compile_json(project["k"], project["out"])
    before = {p: p.stat().st_mtime_ns for p in project["out"].glob("*/*") if p.name != "stats.json"}
    code, rep = compile_json(project["k"], project["out"])
    assert code == 0
    assert rep["executed"] == 0 and rep["traced"] == 0 and rep["trace_cached"] == 1
    assert kernel(rep, "tadd")["status"] == "up to date" and kernel(rep, "tadd")["trace"]["status"] == "cached"
    after = {p: p.stat().st_mtime_ns for p in project["out"].glob("*/*") if p.name != "stats.json"}
    assert after == before
    res = invoke("compile", project["k"], "-o", project["out"], "--workers", "0")
    assert "0 trace(s) of Python kernels, 1 cached; 0 pass execution(s)" in res.stdout


def test_editing_the_py_retraces_it(project):
    compile_json(project["k"], project["out"])
    add = project["k"] / "add.py"
    add.write_text(ADD + "# a comment: traces to the same KLR\n")
    code, rep = compile_json(project["k"], project["out"])
    assert code == 0 and rep["traced"] == 1
    assert executed(rep, "tadd") == 0 and executed(rep, "other") == 0  # same KLR bytes: every record hits
    add.write_text(ADD.replace("nl.add(", "nl.multiply("))
    code, rep = compile_json(project["k"], project["out"])
    assert code == 0 and rep["traced"] == 1
    assert executed(rep, "tadd") > 0 and executed(rep, "other") == 0


def test_changing_the_inputs_in_tusk_toml_retraces(project):
    compile_json(project["k"], project["out"])
    (project["k"] / "tusk.toml").write_text(toml_kernel(inputs=["f32[128,256]", "f32[128,256]"]))
    code, rep = compile_json(project["k"], project["out"])
    assert code == 0 and rep["traced"] == 1 and executed(rep, "tadd") > 0


def test_a_kernel_that_fails_to_trace_fails_alone(project):
    k = project["k"]
    (k / "broken.py").write_text(RAISES)
    (k / "tusk.toml").write_text(toml_kernel() + toml_kernel(name="bad", file="broken.py", function="broken"))
    code, rep = compile_json(k, project["out"])
    assert code == 1
    assert kernel(rep, "tadd")["status"] == "written" and kernel(rep, "other")["status"] == "written"
    bad = kernel(rep, "bad")
    assert bad["status"] == "failed" and bad["fault"] == "input"
    assert f"broken.py:{RAISES_LINE}" in bad["error"] and "the kernel gave up" in bad["error"]
    assert not (project["out"] / "bad").exists()
    res = invoke("compile", k, "-o", project["out"], "--workers", "0")
    assert res.exit_code == 1 and f"broken.py:{RAISES_LINE}" in res.stderr and "Traceback" not in res.output
    (k / "broken.py").write_text(RAISES.replace('    raise ValueError("the kernel gave up")\n',
                                                "    nl.store(out, value=nl.load(a))\n    return out\n"))
    code, rep = compile_json(k, project["out"])  # a failed trace is not remembered: fixed, it builds
    assert code == 0 and kernel(rep, "bad")["status"] == "written" and rep["traced"] == 1


def test_the_same_project_elsewhere_hits_every_record(project, tmp_path):
    compile_json(project["k"], project["out"])
    moved = tmp_path / "elsewhere" / "k"
    shutil.copytree(project["k"], moved)
    code, rep = compile_json(moved, tmp_path / "elsewhere" / "out")
    assert code == 0 and rep["traced"] == 0 and rep["trace_cached"] == 1 and rep["executed"] == 0
    assert (tmp_path / "elsewhere" / "out" / "tadd" / "tadd.klr").read_bytes() == \
        (project["out"] / "tadd" / "tadd.klr").read_bytes()


def test_a_grid_is_part_of_the_trace(project):
    compile_json(project["k"], project["out"])
    (project["k"] / "tusk.toml").write_text(toml_kernel(function="add", grid=[2]))
    code, rep = compile_json(project["k"], project["out"])
    assert code == 0 and rep["traced"] == 1 and executed(rep, "tadd") > 0
    assert kernel(rep, "tadd")["trace"]["grid"] == [2]


def test_a_new_front_end_retraces(project, monkeypatch):
    from tusk.workflows import traced

    compile_json(project["k"], project["out"])
    monkeypatch.setattr(traced, "frontend_digest", lambda: "0" * 64)
    code, rep = compile_json(project["k"], project["out"])
    assert code == 0 and rep["traced"] == 1 and rep["executed"] == 0  # same KLR: no pass reruns


def test_what_a_kernel_prints_does_not_spoil_json_output(project):
    (project["k"] / "add.py").write_text('print("hello from the kernel")\n' + ADD)
    code, rep = compile_json(project["k"], project["out"])  # parses stdout as JSON
    assert code == 0 and rep["traced"] == 1


def test_trace_to_a_missing_directory_is_refused_before_tracing(tmp_path, cache, monkeypatch):
    (tmp_path / "add.py").write_text(ADD + '\nopen(__file__ + ".ran", "w").close()\n')
    monkeypatch.chdir(tmp_path)
    res = invoke(*trace_args("add.py::add", "-o", "nosuch/k.klr"))
    assert res.exit_code == 2 and "nosuch" in res.stderr
    assert not (tmp_path / "add.py.ran").exists()


SCALED = '''\
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl
from helpers import scaled


@nki.jit
def scale(a, shape2D, eps=1.0, *, dtype=nl.float32, flag=False):
    assert shape2D == (32, 16), shape2D
    out = nl.ndarray(a.shape, dtype=dtype, buffer=nl.shared_hbm)
    nl.store(out, value=scaled(nl.load(a), eps * (2.0 if flag else 1.0)))
    return out
'''
HELPER = "import neuronxcc.nki.language as nl\n\n\ndef scaled(t, f):\n    return nl.multiply(t, f)\n"


def _scaled_output(klr_path: Path):
    import numpy as np

    from tusk.frontend.check import run_klr

    a = np.arange(128 * 512, dtype=np.float32).reshape(128, 512) / 1000
    return a, run_klr(klr_path.read_bytes(), {"a": a})["out"]


def test_trace_binds_arg_values_by_parameter_name(tmp_path, cache, monkeypatch):
    (tmp_path / "k.py").write_text(SCALED)
    (tmp_path / "helpers.py").write_text(HELPER)
    monkeypatch.chdir(tmp_path)
    res = invoke(*trace_args("k.py::scale", "--arg", "shape2D=32,16", "--arg", "eps=0.25", "--arg", "dtype=f32",
                             "--arg", "flag=true", "-o", "s.klr", inputs=["f32[128,512]"]))
    assert res.exit_code == 0, res.output
    a, out = _scaled_output(tmp_path / "s.klr")
    assert (out == a * 0.5).all()
    res = invoke(*trace_args("k.py::scale", "--arg", "eps=2", "-o", "s.klr", inputs=["f32[128,512]"]))
    assert res.exit_code == 1 and "k.py" in res.stderr and "no value for parameter shape2D" in res.stderr
    res = invoke(*trace_args("k.py::scale", "--arg", "shape2D=32,16", "--arg", "epsilon=2", "-o", "s.klr",
                             inputs=["f32[128,512]"]))
    assert res.exit_code == 1 and "argument epsilon" in res.stderr and "no parameter 'epsilon'" in res.stderr


@pytest.fixture
def scaled_project(tmp_path, cache):
    k = tmp_path / "k"
    k.mkdir()
    (k / "k.py").write_text(SCALED)
    (k / "helpers.py").write_text(HELPER)
    (k / "tusk.toml").write_text(toml_kernel(name="scale", file="k.py", inputs=["f32[128,512]"],
                                             args={"shape2D": [32, 16], "eps": 0.25, "dtype": "f32"}))
    return {"k": k, "out": tmp_path / "out"}


def test_toml_args_are_bound_and_part_of_the_trace_key(scaled_project):
    k, out = scaled_project["k"], scaled_project["out"]
    code, rep = compile_json(k, out)
    assert code == 0 and rep["traced"] == 1, rep
    assert kernel(rep, "scale")["trace"]["args"] == {"dtype": "nl.float32", "eps": "0.25", "shape2D": "(32, 16)"}
    a, got = _scaled_output(out / "scale" / "scale.klr")
    assert (got == a * 0.25).all()
    code, rep = compile_json(k, out)
    assert code == 0 and rep["traced"] == 0 and rep["trace_cached"] == 1
    (k / "tusk.toml").write_text(toml_kernel(name="scale", file="k.py", inputs=["f32[128,512]"],
                                             args={"shape2D": [32, 16], "eps": 0.25, "flag": True}))
    code, rep = compile_json(k, out)
    assert code == 0 and rep["traced"] == 1 and executed(rep, "scale") > 0
    a, got = _scaled_output(out / "scale" / "scale.klr")
    assert (got == a * 0.5).all()


def test_editing_an_imported_helper_retraces_and_changes_the_klr(scaled_project):
    k, out = scaled_project["k"], scaled_project["out"]
    code, rep = compile_json(k, out)
    assert code == 0 and kernel(rep, "scale")["trace"]["sources"] == {
        "helpers.py": hashlib.sha256(HELPER.encode()).hexdigest()}
    before = (out / "scale" / "scale.klr").read_bytes()
    (k / "helpers.py").write_text(HELPER.replace("nl.multiply(t, f)", "nl.add(t, f)"))
    code, rep = compile_json(k, out)
    assert code == 0 and rep["traced"] == 1 and kernel(rep, "scale")["trace"]["status"] == "executed"
    after = (out / "scale" / "scale.klr").read_bytes()
    assert after != before
    a, got = _scaled_output(out / "scale" / "scale.klr")
    assert (got == a + 0.25).all()
    code, rep = compile_json(k, out)
    assert code == 0 and rep["traced"] == 0 and rep["trace_cached"] == 1


LAUNCHED = '''\
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl


@nki.jit
def tile_add(a, b):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    ix = nl.program_id(0) * 128 + nl.arange(128)[:, None]
    iy = nl.arange(a.shape[1])[None, :]
    nl.store(out[ix, iy], value=nl.add(nl.load(a[ix, iy]), nl.load(b[ix, iy])))
    return out


def launcher(a, b):
    return tile_add[a.shape[0] // 128](a, b)
'''


def test_trace_of_a_launcher_and_of_a_grid_past_the_ceiling(tmp_path, cache, monkeypatch):
    import numpy as np

    from tusk.frontend.check import run_klr

    (tmp_path / "k.py").write_text(LAUNCHED)
    monkeypatch.chdir(tmp_path)
    res = invoke(*trace_args("k.py::launcher", "-o", "l.klr", inputs=["f32[512,64]", "f32[512,64]"]))
    assert res.exit_code == 0, res.output
    a, b = (np.random.default_rng(s).standard_normal((512, 64)).astype(np.float32) for s in (1, 2))
    assert np.array_equal(run_klr((tmp_path / "l.klr").read_bytes(), {"a": a, "b": b})["out"], a + b)
    res = invoke(*trace_args("k.py::tile_add", "--grid", "65536,65536", "-o", "g.klr",
                             inputs=["f32[512,64]", "f32[512,64]"]))
    assert res.exit_code == 1 and "Compiler generated too many instructions" in res.stderr
    assert "k.py" in res.stderr and not (tmp_path / "g.klr").exists()


EXITS = ADD.replace("@nki.jit\ndef add(a, b):\n", "@nki.jit\ndef add(a, b):\n    import os\n    os._exit(0)\n")
INTERRUPTS = ADD.replace("@nki.jit\ndef add(a, b):\n", "@nki.jit\ndef add(a, b):\n    raise KeyboardInterrupt\n")


def test_a_kernel_exiting_the_tracer_or_raising_keyboard_interrupt_fails_alone(project):
    """os._exit(0) in a kernel cannot end the build with exit 0; its KeyboardInterrupt is not Ctrl-C."""
    k = project["k"]
    (k / "exits.py").write_text(EXITS)
    (k / "interrupts.py").write_text(INTERRUPTS)
    (k / "tusk.toml").write_text(toml_kernel() + toml_kernel(name="exits", file="exits.py")
                                 + toml_kernel(name="stops", file="interrupts.py"))
    code, rep = compile_json(k, project["out"])
    assert code == 1
    assert kernel(rep, "tadd")["status"] == "written" and (project["out"] / "tadd" / "tadd.klr").exists()
    exits, stops = kernel(rep, "exits"), kernel(rep, "stops")
    assert exits["status"] == "failed" and exits["fault"] == "input"
    assert "exits.py" in exits["error"] and "os._exit(0)" in exits["error"], exits["error"]
    assert stops["status"] == "failed" and stops["fault"] == "input"
    assert "interrupts.py:7" in stops["error"] and "KeyboardInterrupt" in stops["error"], stops["error"]
    assert "interrupted" not in json.dumps(rep).lower()


def test_a_kernel_whose_trace_never_ends_fails_alone_at_the_time_limit(project):
    """A loop in the kernel's Python that never ends fails that kernel at ``trace_timeout``; the build's other
    kernels are built, and the next trace runs in a new tracer."""
    import time

    k = project["k"]
    (k / "spin.py").write_text(ADD.replace("@nki.jit\ndef add(a, b):\n", "@nki.jit\ndef add(a, b):\n"
                                           "    while True:\n        pass\n"))
    (k / "tusk.toml").write_text("trace_timeout = 2\n" + toml_kernel(name="spin", file="spin.py") + toml_kernel())
    t0 = time.monotonic()
    code, rep = compile_json(k, project["out"])
    assert time.monotonic() - t0 < 60
    assert code == 1
    spin = kernel(rep, "spin")
    assert spin["status"] == "failed" and spin["fault"] == "input", spin
    assert "spin.py" in spin["error"] and "did not finish within 2 s" in spin["error"], spin["error"]
    assert "trace_timeout" in spin["error"]
    assert kernel(rep, "tadd")["status"] == "written" and (project["out"] / "tadd" / "tadd.klr").exists()


def test_a_kernel_that_patches_the_api_it_imports_does_not_change_the_next_kernels_trace(project):
    """Each kernel traces in a process of its own: kernel a's `nl.add = nl.subtract` (and a numpy patch) made
    kernel b's trace -- and the cache note kept under b's own key -- subtract."""
    k = project["k"]
    (k / "patches.py").write_text(ADD.replace("@nki.jit", "import numpy as np\nnl.add = nl.subtract\n"
                                                         "np.float32 = np.float64\n\n\n@nki.jit"))
    (k / "tusk.toml").write_text(toml_kernel(name="patches", file="patches.py") + toml_kernel())
    code, rep = compile_json(k, project["out"])
    assert code == 0, rep
    ops = {name: (project["out"] / name / f"{name}.bir.json").read_text() for name in ("patches", "tadd")}
    assert '"op":"subtract"' in ops["patches"]  # the kernel's own patch holds in its own trace
    assert '"op":"add"' in ops["tadd"] and '"op":"subtract"' not in ops["tadd"], ops["tadd"][:2000]


def test_tracing_in_the_child_writes_the_same_bytes_as_in_this_process(project, tmp_path):
    from tusk.workflows.project import load
    from tusk.workflows.traced import Tracer, trace_kernel

    spec = next(s for s in load(project["k"]).kernels if s.name == "tadd")
    here, child = tmp_path / "here", tmp_path / "child"
    here.mkdir()
    child.mkdir()
    a = trace_kernel(spec, None, here, "gen3")
    with Tracer() as tracer:
        b = trace_kernel(spec, None, child, "gen3", tracer)
        assert tracer.last_seconds is not None and b.trace["seconds"] == tracer.last_seconds
    assert a.error is None and b.error is None
    assert (here / "tadd.klr").read_bytes() == (child / "tadd.klr").read_bytes()


def test_ctrl_c_while_a_kernel_traces_stops_the_build_and_its_tracer(project, tmp_path):
    """The tracer child ignores SIGINT (a KeyboardInterrupt there is the kernel's): a real Ctrl-C to the build
    still ends it at once, exit 130, and leaves no tracer behind."""
    import os
    import signal
    import subprocess
    import sys
    import time

    k = project["k"]
    marker = tmp_path / "tracing"
    (k / "slow.py").write_text(ADD.replace("@nki.jit\ndef add(a, b):\n", "@nki.jit\ndef add(a, b):\n"
                                           f"    open({str(marker)!r}, 'w').close()\n"
                                           "    import time\n    time.sleep(120)\n"))
    (k / "tusk.toml").write_text(toml_kernel(name="slow", file="slow.py"))
    root = Path(__file__).resolve().parent.parent
    env = dict(os.environ, PYTHONPATH=str(root))
    proc = subprocess.Popen([sys.executable, "-m", "tusk.workflows.cli", "compile", str(k), "-o", str(project["out"]),
                             "--workers", "0"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while not marker.exists() and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.1)
        assert marker.exists(), proc.communicate(timeout=10)
        t0 = time.monotonic()
        os.killpg(proc.pid, signal.SIGINT)  # as a terminal's Ctrl-C: the whole process group
        _, err = proc.communicate(timeout=30)
        elapsed = time.monotonic() - t0
        assert elapsed < 4.5, elapsed  # not the 5 s a polite wait for the child would add
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 130 and "interrupted" in err and "Traceback" not in err, err
    left = subprocess.run(["ps", "-o", "pid=", "-g", str(proc.pid)], capture_output=True, text=True).stdout.split()
    assert left == [], left
