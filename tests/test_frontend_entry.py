"""How a kernel file is loaded, called and bounded: arguments by name, nki.typing and the import forms,
stand-ins for absent packages, launchers, kernels in packages and their helpers, trace limits, loops left
early, and outputs written only in part.  Each kernel is written here and run in the interpreter against
numpy."""

from __future__ import annotations

import importlib.util
import sys
import textwrap
import time
import types

import numpy as np
import pytest

from tusk.frontend import TraceError, trace_file
from tusk.frontend.args import arg_text, parse_arg, parse_value
from tusk.frontend.check import UnwrittenOutput, run_klr
from tusk.frontend.tensors import Dtype
from tusk.ir.errors import UsageError

HEADER = """\
import numpy as np
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl
"""

SCALE = """
@nki.jit
def k(a, shape2D, eps=1e-6, *, dtype=nl.float32, flag=False, offset=0.0):
    assert shape2D == (32, 16) and isinstance(shape2D, tuple), shape2D
    out = nl.ndarray(a.shape, dtype=dtype, buffer=nl.shared_hbm)
    t = nl.load(a)
    nl.store(out, value=nl.multiply(t, eps * (2.0 if flag else 1.0)) + offset)
    return out
"""


def write(tmp_path, body: str, name: str = "k.py", header: str = HEADER):
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(header + textwrap.dedent(body))
    return path


A = np.random.default_rng(7).standard_normal((128, 512)).astype(np.float32)


# ====================================================================== arguments


@pytest.mark.parametrize("text, value", [
    ("32,16", (32, 16)), ("(32, 16)", (32, 16)), ("[1, 2]", [1, 2]), ("1e-6", 1e-6), ("-3", -3),
    ("true", True), ("False", False), ("None", None), ("'fast'", "fast"), ("fast", "fast"),
    ("bf16", Dtype("bfloat16")), ("nl.float32", Dtype("float32")), ("float8_e5m2", Dtype("float8e5")),
    ("__import__('os').system('x')", "__import__('os').system('x')"),  # never executed: a string
])
def test_argument_values_are_literals_bools_dtypes_or_strings(text, value):
    got = parse_value(text)
    assert got == value and type(got) is type(value)


def test_argument_spelling_is_stable_for_the_trace_key():
    assert arg_text(parse_value("32,16")) == "(32, 16)" and arg_text(parse_value("bf16")) == "nl.bfloat16"
    assert arg_text(1e-6) == "1e-06" and arg_text((5,)) == "(5,)"
    for bad in ("eps", "=1", "1x=2", "eps="):
        with pytest.raises(UsageError):
            parse_arg(bad)


@pytest.mark.parametrize("text", ["shape2D=(32,", "eps=1e-6x", "v=[1, 2", "s='open"])
def test_a_literal_with_a_slip_is_refused_not_taken_as_a_string(text):
    with pytest.raises(UsageError, match="is not a Python literal"):
        parse_arg(text)


def test_arguments_bind_by_name_with_defaults_and_keyword_only_parameters(tmp_path):
    path = write(tmp_path, SCALE)
    data = trace_file(path, "k", ["f32[128,512]"], args={"shape2D": (32, 16), "eps": 0.5, "flag": True,
                                                         "offset": 1.0})
    assert np.allclose(run_klr(data, {"a": A})["out"], A * 1.0 + 1.0)
    data = trace_file(path, "k", ["f32[128,512]"], args={"shape2D": (32, 16)})  # eps, flag, offset: defaults
    assert np.allclose(run_klr(data, {"a": A})["out"], A * 1e-6, rtol=1e-5)
    data = trace_file(path, "k", ["f32[128,512]"], args={"shape2D": (32, 16), "dtype": Dtype("bfloat16")})
    assert run_klr(data, {"a": A})["out"].shape == (128, 512)


@pytest.mark.parametrize("args, needle", [
    ({}, "no value for parameter shape2D"),
    ({"shape2D": (32, 16), "epsilon": 1.0}, "argument epsilon: kernel k has no parameter 'epsilon'"),
])
def test_a_missing_or_unknown_argument_is_named(tmp_path, args, needle):
    path = write(tmp_path, SCALE)
    with pytest.raises(TraceError, match=needle) as e:
        trace_file(path, "k", ["f32[128,512]"], args=args)
    assert "k.py" in str(e.value) and "its parameters: a, shape2D, eps, dtype, flag, offset" in str(e.value)


def test_tensors_fill_the_parameters_left_in_order(tmp_path):
    path = write(tmp_path, """
        @nki.jit
        def k(scale, a, b, *, out_dtype=nl.float32):
            out = nl.ndarray(a.shape, dtype=out_dtype, buffer=nl.shared_hbm)
            nl.store(out, value=nl.subtract(nl.load(a), nl.load(b)) * scale)
            return out
    """)
    b = A[::-1].copy()
    data = trace_file(path, "k", ["f32[128,512]", "f32[128,512]"], args={"scale": 3.0})
    assert np.allclose(run_klr(data, {"a": A, "b": b})["out"], (A - b) * 3.0)


# ====================================================================== imports


def test_nki_typing_and_every_import_form_of_the_nki_names(tmp_path):
    path = write(tmp_path, """
        from neuronxcc import nki as nki2
        from neuronxcc.nki.typing import tensor
        import neuronxcc.nki.typing as nt
        import nki
        import nki.typing
        import nki.isa as nisa
        from nki import language as nl2
        from nki.language import affine_range, par_dim
        import neuronxcc.nki.isa

        ANNOTATED: tensor[64, 512] = None

        @nki2.jit
        def k(a: nt.tensor, b: nt.mutable_tensor[128, 512]) -> tensor:
            out: tensor[128, 512] = nl2.ndarray(a.shape, dtype=nt.float32, buffer=nl2.shared_hbm)
            for i in affine_range(1):
                nl2.store(out, value=nl2.add(nl2.load(a), nl2.load(b)))
            return out
    """)
    data = trace_file(path, "k", ["f32[128,512]", "f32[128,512]"])
    assert np.allclose(run_klr(data, {"a": A, "b": A})["out"], 2 * A)
    assert "nki" not in sys.modules and "neuronxcc" not in sys.modules


USES_AN_UNKNOWN_NAME = """
    from nki.isa import no_such_instruction
    from nki.language import no_such_call as unused

    @nki.jit
    def k(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        nl.store(out, nl.load(a))
        return out
"""


@pytest.mark.parametrize("use, words", [
    ("", None),
    ("no_such_instruction(out)", r"k\.py:12: not supported: nki\.isa\.no_such_instruction \(not in Tusk's NKI"),
    ("import neuronxcc.nki.isa as nisa; nisa.no_such_instruction(out)",
     r"k\.py:12: not supported: nisa\.no_such_instruction \(not in Tusk's NKI"),
])
def test_an_unsupported_name_imported_from_nki_is_refused_only_where_a_kernel_uses_it(tmp_path, use, words):
    # nki-library's modules import names of instructions that only some of their kernels call
    path = write(tmp_path, USES_AN_UNKNOWN_NAME.replace("        return out", f"        {use}\n        return out"))
    if words is None:
        assert np.array_equal(run_klr(trace_file(path, "k", ["f32[128,512]"]), {"a": A})["out"], A)
        return
    with pytest.raises(TraceError, match=words):
        trace_file(path, "k", ["f32[128,512]"])


ABSENT = """\
import torch
import torch_xla.core.xla_model as xm
from scipy.special import softmax
from transformers import AutoModel
import jax.numpy as jnp
import pytest
import neuronxcc.nki.simulate_helpers as helpers
from neuronxcc.starfish.support.util import allclose
import numpy as np
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl

DEVICE = xm.xla_device()
SB_MOD = nki.compiler.sbuf.mod_alloc


class Reference(torch.nn.Module):
    pass


@pytest.mark.parametrize("n", [1, 2])
def test_it(n):
    assert torch.allclose(torch.ones(n), torch.ones(n))


@nki.compiler.skip_middle_end_transformations
@nki.jit
def k(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    nl.store(out, value=nl.exp(nl.load(a)))
    return out


@nki.jit
def uses_torch(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    t = torch.zeros(3)
    return out


@nki.jit
def uses_helper(a):
    return allclose(a, a)
"""


def _absent(*names: str) -> None:
    installed = [n for n in names if importlib.util.find_spec(n) is not None]
    if installed:
        pytest.skip(f"installed here: {', '.join(installed)}")


def test_packages_the_kernel_imports_but_never_uses_do_not_stop_the_trace(tmp_path):
    _absent("torch", "torch_xla", "transformers", "jax")  # scipy and pytest import for real where installed
    (tmp_path / "k.py").write_text(ABSENT)
    data = trace_file(tmp_path / "k.py", "k", ["f32[128,512]"])
    assert np.allclose(run_klr(data, {"a": A})["out"], np.exp(A), rtol=1e-5)


def test_using_an_absent_package_is_refused_at_the_line_naming_it(tmp_path):
    _absent("torch", "torch_xla", "transformers", "jax")
    (tmp_path / "k.py").write_text(ABSENT)
    before = set(sys.modules)
    with pytest.raises(TraceError, match=r"k\.py:37: the kernel uses torch\.zeros, but torch is not installed"
                                         r".*imported at .*k\.py:1\)"):
        trace_file(tmp_path / "k.py", "uses_torch", ["f32[128,512]"])
    with pytest.raises(TraceError, match=r"k\.py:43: not supported: neuronxcc\.starfish\.support\.util\.allclose"):
        trace_file(tmp_path / "k.py", "uses_helper", ["f32[128,512]"])
    assert not {m for m in set(sys.modules) - before if m.split(".")[0] in ("torch", "scipy", "neuronxcc", "nki")}


def test_import_star_from_a_module_that_is_not_there_is_refused_at_its_line(tmp_path):
    path = write(tmp_path, "from apis_not_here import *\n")
    with pytest.raises(TraceError, match=r"k\.py:4: the file imports \* from apis_not_here, but apis_not_here is "
                                         r"not installed \(nor a module of the kernel's directory\)"):
        trace_file(path, None, [])


def test_installed_packages_import_normally_and_a_library_optional_import_still_fails(tmp_path):
    path = write(tmp_path, """
        import numpy.linalg as la
        try:
            import json.no_such_module  # a module the kernel imports: a stand-in
            STAND_IN = True
        except ImportError:
            STAND_IN = False

        @nki.jit
        def k(a):
            assert STAND_IN and la.norm(np.ones(4)) == 2.0
            out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
            nl.store(out, value=nl.load(a))
            return out
    """)
    data = trace_file(path, "k", ["f32[128,512]"])
    assert np.array_equal(run_klr(data, {"a": A})["out"], A)


# ====================================================================== launchers


LAUNCHER = """
@nki.jit
def add_tile(a, b):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    ix = nl.program_id(0) * 128 + nl.arange(128)[:, None]
    iy = nl.program_id(1) * 256 + nl.arange(256)[None, :]
    nl.store(out[ix, iy], value=nl.add(nl.load(a[ix, iy]), nl.load(b[ix, iy])) * (1 + nl.program_id(0)))
    return out


def add(a, b):
    return add_tile[a.shape[0] // 128, a.shape[1] // 256](a, b)


def add_twice(a, b):
    c = add_tile[a.shape[0] // 128, a.shape[1] // 256](a, b)
    return add_tile[a.shape[0] // 128, a.shape[1] // 256](c, b)
"""


def test_a_launcher_calling_kernel_grid_traces_the_kernel_on_that_grid(tmp_path):
    path = write(tmp_path, LAUNCHER)
    a, b = (np.random.default_rng(s).standard_normal((256, 512)).astype(np.float32) for s in (1, 2))
    factor = np.repeat([[1.0], [2.0]], 128, axis=0).astype(np.float32)
    data = trace_file(path, "add", ["f32[256,512]", "f32[256,512]"])
    assert np.allclose(run_klr(data, {"a": a, "b": b})["out"], (a + b) * factor)
    data = trace_file(path, "add_twice", ["f32[256,512]", "f32[256,512]"])
    got = run_klr(data, {"a": a, "b": b})  # the first launch's result is internal: only what is returned is out
    assert list(got) == ["out.2"] and np.allclose(got["out.2"], ((a + b) * factor + b) * factor, rtol=1e-5)


def test_a_grid_launch_of_a_plain_function_says_it_needs_nki_jit(tmp_path):
    path = write(tmp_path, LAUNCHER.replace("@nki.jit\n", ""))
    with pytest.raises(TraceError, match=r"k\.py:\d+: TypeError: 'function' object is not subscriptable \(a kernel "
                                         r"launched on a grid, f\[grid\]\(\.\.\.\), must be marked @nki\.jit\)"):
        trace_file(path, "add", ["f32[256,512]", "f32[256,512]"])


# ====================================================================== packages and helpers


def test_a_kernel_in_a_package_with_relative_imports_traces_and_leaves_no_trace(tmp_path):
    pkg = tmp_path / "lib" / "mypkg"
    (pkg / "core").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "core" / "__init__.py").write_text("from . import utils\n")
    (pkg / "core" / "utils.py").write_text("import neuronxcc.nki.language as nl\n\n\ndef scaled(t):\n"
                                           "    return nl.multiply(t, 3.0)\n")
    path = write(pkg / "core", """
        from .utils import scaled
        from ..core import utils

        @nki.jit
        def k(a):
            out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
            nl.store(out, value=utils.scaled(scaled(nl.load(a))))
            return out
    """, name="kern.py")
    path_before, modules_before = list(sys.path), set(sys.modules)
    data = trace_file(path, "k", ["f32[128,512]"])
    assert np.allclose(run_klr(data, {"a": A})["out"], 9 * A)
    assert sys.path == path_before and not {m for m in set(sys.modules) - modules_before if "mypkg" in m}


def test_sibling_modules_import_and_are_read_again_by_the_next_trace(tmp_path, monkeypatch):
    other = tmp_path / "elsewhere" / "helpers.py"  # a module of that name another project loaded before
    other.parent.mkdir()
    other.write_text("def twice(t):\n    raise AssertionError('the wrong helpers')\n")
    foreign = types.ModuleType("helpers")
    foreign.__file__ = str(other)
    monkeypatch.setitem(sys.modules, "helpers", foreign)
    (tmp_path / "helpers.py").write_text("import neuronxcc.nki.language as nl\n\n\ndef twice(t):\n"
                                         "    return nl.add(t, t)\n")
    path = write(tmp_path, """
        from helpers import *
        import helpers

        @nki.jit
        def k(a):
            out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
            nl.store(out, value=helpers.twice(twice(nl.load(a))))
            return out
    """)
    assert np.allclose(run_klr(trace_file(path, "k", ["f32[128,512]"]), {"a": A})["out"], 4 * A)
    (tmp_path / "helpers.py").write_text("import neuronxcc.nki.language as nl\n\n\ndef twice(t):\n"
                                         "    return nl.multiply(t, 3.0)\n")
    assert np.allclose(run_klr(trace_file(path, "k", ["f32[128,512]"]), {"a": A})["out"], 9 * A)
    assert sys.modules["helpers"] is foreign


# ====================================================================== limits


def _looped(name: str, *loops: str) -> str:
    """A kernel that copies its input to its output inside ``loops`` (loop headers, outermost first)."""
    body = "".join(f"{'    ' * (d + 1)}for i{d} in {loop}:\n" for d, loop in enumerate(loops))
    return (f"\n\n@nki.jit\ndef {name}(a):\n    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)\n"
            f"{body}{'    ' * (len(loops) + 1)}nl.store(out, value=nl.load(a))\n    return out\n")


LIMITS = "".join([
    _looped("plain"),
    _looped("static", "nl.static_range(10**9)"),
    _looped("python", "range(10**7)"),
    _looped("affine", "nl.affine_range(256**128)"),
    _looped("nested", "nl.affine_range(8192)", "nl.sequential_range(4096)"),
    _looped("static_nest", "nl.static_range(400)", "nl.static_range(400)"),
    _looped("grid_late", "nl.static_range(200)"),
])
CEILING_MESSAGE = "Compiler generated too many instructions, this may due to a failure in parallelism extraction"


@pytest.mark.parametrize("function, grid, at, needle", [
    ("plain", (65536, 65536), None, CEILING_MESSAGE),
    ("static", (), "in nl.static_range(10**9)", CEILING_MESSAGE),
    ("python", (), "in range(10**7)", "the trace would record 20,000,000 statements"),
    ("affine", (), "in nl.affine_range(256**128)", CEILING_MESSAGE),
    ("nested", (), "    nl.store", CEILING_MESSAGE),
    ("static_nest", (), "i0 in nl.static_range(400)", "the trace would record 320,000 statements"),
    ("grid_late", (4096,), None, "the trace would record"),
])
def test_traces_past_the_limits_are_refused_fast(tmp_path, function, grid, at, needle):
    path = write(tmp_path, LIMITS)
    t0 = time.perf_counter()
    with pytest.raises(TraceError) as e:
        trace_file(path, function, ["f32[128,512]"], grid)
    assert time.perf_counter() - t0 < 20
    assert needle in str(e.value) and "k.py" in str(e.value)
    if at is not None:  # the line of the loop (or statement) of this kernel that passes the limit
        lines = path.read_text().splitlines()
        first = next(n for n, text in enumerate(lines, 1) if text.startswith(f"def {function}("))
        line = next(n for n, text in enumerate(lines, 1) if n > first and at in text)
        assert f"k.py:{line}:" in str(e.value)


# ====================================================================== loops left early, partial outputs


EARLY_RETURN = """
@nki.jit
def k(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    ix = nl.arange(128)[:, None]
    iy = nl.arange(a.shape[1])[None, :]
    for i in nl.affine_range((a.shape[0] + 127) // 128):
        rows = i * 128 + ix
        t = nl.load(a[rows, iy], mask=(rows < a.shape[0]))
        nl.store(out[rows, iy], value=t, mask=(rows < a.shape[0]))
        if True:
            return out
    return out


@nki.jit
def breaks(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    for i in nl.sequential_range(a.shape[0] // 128):
        nl.store(out[i * 128:(i + 1) * 128, :], value=nl.load(a[i * 128:(i + 1) * 128, :]))
        break
    return out
"""


@pytest.mark.parametrize("rows", [250, 256])
def test_a_return_inside_an_affine_loop_is_refused_at_the_return_with_or_without_a_peel(tmp_path, rows):
    path = write(tmp_path, EARLY_RETURN)
    with pytest.raises(TraceError, match=r"k\.py:15: a `break` or `return` inside an nl\.affine_range"):
        trace_file(path, "k", [f"f32[{rows},500]"])
    with pytest.raises(TraceError, match=r"k\.py:24: a `break` or `return`"):
        trace_file(path, "breaks", [f"f32[{rows + 256},500]"])


def test_an_output_written_only_in_part_is_refused_by_the_check(tmp_path):
    path = write(tmp_path, """
        @nki.jit
        def k(a):
            out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
            nl.store(out[0:64, :], value=nl.load(a[0:64, :]))
            return out
    """)
    data = trace_file(path, "k", ["f32[128,512]"])
    with pytest.raises(UnwrittenOutput, match="32,768 of the 65,536 elements of output out are never written"):
        run_klr(data, {"a": A})
    assert np.array_equal(run_klr(data, {"a": A}, check_written=False)["out"][:64], A[:64])


def test_a_file_checking_itself_with_nki_simulate_loads_and_torch_neuronx_nki_jit_marks_a_kernel(tmp_path):
    _absent("torch_neuronx")
    path = write(tmp_path, """
        from torch_neuronx import nki_jit

        @nki_jit
        def k(a, b):
            out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
            nl.store(out, value=nl.multiply(nl.load(a), nl.load(b)))
            return out

        x = np.arange(128 * 512, dtype=np.float32).reshape(128, 512) / 7
        np.testing.assert_allclose(nki.simulate(k)(x, x + 1), x * (x + 1), rtol=1e-6)
        np.testing.assert_allclose(nki.simulate_kernel(k, x, x), x * x, rtol=1e-6)

        @nki.trace
        def direct(a: nki.tensor):  # the decorator's earlier name; called on arrays as simulation mode runs it
            out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
            nl.store(out, value=nl.exp(nl.load(a)))
            return out

        np.testing.assert_allclose(direct(x / 1e4), np.exp(x / 1e4), rtol=1e-5)
    """)
    data = trace_file(path, "k", ["f32[128,512]", "f32[128,512]"])
    assert np.allclose(run_klr(data, {"a": A, "b": A})["out"], A * A)


def test_a_script_calling_its_kernel_on_bfloat16_arrays_stops_its_top_level_there(tmp_path):
    # numpy holds nl.bfloat16 as raw bytes: the file's own check cannot run, so the top level ends at the call
    path = write(tmp_path, """
        @nki.jit
        def k(a):
            out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
            nl.store(out, value=nl.multiply(nl.load(a), 3.0))
            return out

        x = np.random.rand(128, 64).astype(nl.bfloat16)
        try:
            o = k(x)
        except Exception:
            raise SystemExit("the kernel call raised")
        raise SystemExit("the top level ran on")
    """)
    got = run_klr(trace_file(path, "k", ["f32[128,64]"]), {"a": A[:, :64]})["out"]
    np.testing.assert_allclose(got, A[:, :64] * 3.0, rtol=1e-6)
    # a kernel defined after the call is not there: named, not traced from a half-run file silently
    after = write(tmp_path, """
        @nki.jit
        def first(a):
            return a

        o = first(np.zeros((128, 64), np.float32).astype(nl.bfloat16))

        @nki.jit
        def later(a):
            return a
    """)
    with pytest.raises(TraceError) as e:
        trace_file(after, "later", ["f32[128,64]"])
    assert "no function 'later'" in str(e.value) and "stopped at line 9" in str(e.value)
