"""Small passes for build-system tests and benchmarks (importable by Dask workers).

They follow the pass contract of ``tusk.stages.base`` exactly, so the build
treats them like the real passes; ``TEST_REGISTRY`` maps their names to the
``"module:Class"`` references a pipeline file uses for passes that are not
registered.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

import numpy as np

from tusk.ir.enums import Kind
from tusk.ir.errors import PassError
from tusk.ir.module import Module
from tusk.ir.values import ImmValue
from tusk.stages.base import Pass, option
from tusk.stages.unroll import Unroll

HERE = "tests.passes_for_tests"


@dataclass(frozen=True)
class Scale(Pass):
    """Multiply every float immediate operand by ``factor``; record the factor as a module attribute."""

    name = "test_scale"
    version = "1"

    factor: float = option(1.0, "multiplier")

    def run(self, module: Module):
        out = module.copy()
        scaled = 0
        for fn in out.functions:
            ops = fn.operands
            if not len(ops):
                continue
            rows = np.nonzero(ops["kind"] == Kind.IMM)[0]
            aux = ops["aux"]
            for j in rows.tolist():
                v = fn.value(int(aux[j]))
                if isinstance(v, ImmValue) and isinstance(v.value, float):
                    aux[j] = fn.intern(ImmValue(v.value * self.factor))
                    scaled += 1
        out = out.with_attributes(test_scale=self.factor)
        return out, {"scaled": scaled}


@dataclass(frozen=True)
class Count(Pass):
    """Count instructions; annotate the module with the count."""

    name = "test_count"
    version = "1"

    def run(self, module: Module):
        n = module.n_insts()
        return module.with_attributes(test_count=n), {"instructions": n}


@dataclass(frozen=True)
class Identity(Pass):
    """Return the input unchanged whatever the options (early cutoff tests)."""

    name = "test_identity"
    version = "1"

    salt: int = option(0, "changes the key, not the output")

    def run(self, module: Module):
        return module.copy(), {"salt": self.salt}


@dataclass(frozen=True)
class PerFunction(Pass):
    """Splittable: tag every function (one part per function), merge in order."""

    name = "test_per_function"
    version = "1"
    splittable = True

    tag: str = option("x", "the tag")

    def run(self, module: Module):
        out = module.copy()
        for fn in out.functions:
            fn.extras = fn.extras.with_(test_tag=self.tag)
        return out, {"functions": len(out.functions)}

    def split(self, module: Module):
        if len(module.functions) < 2:
            return None
        return [Module([f.copy()], module.arch, module.version, module.attributes, module.artifact_dir,
                       module.queues, module.extras) for f in module.functions]

    def merge(self, module: Module, parts, part_stats):
        out = Module([p.functions[0] for p in parts], module.arch, module.version, module.attributes,
                     module.artifact_dir, module.queues, module.extras)
        return out, {"functions": sum(s["functions"] for s in part_stats), "parts": len(parts)}


@dataclass(frozen=True)
class Sleep(Pass):
    """Wait, then annotate (worker-failure tests need a task that is still running)."""

    name = "test_sleep"
    version = "1"

    seconds: float = option(0.5, "how long")

    def run(self, module: Module):
        time.sleep(self.seconds)
        return module.with_attributes(test_slept=self.seconds), {}


@dataclass(frozen=True)
class Spin(Pass):
    """Burn CPU for a while, then annotate (benchmarks of parallel builds)."""

    name = "test_spin"
    version = "1"

    milliseconds: int = option(200, "CPU time to burn")
    salt: int = option(0, "changes the output")

    def run(self, module: Module):
        end = time.process_time() + self.milliseconds / 1000.0
        x = 0
        while time.process_time() < end:
            for _ in range(1000):
                x += 1
        return module.with_attributes(test_spin=self.salt), {"spun_ms": self.milliseconds}


@dataclass(frozen=True)
class FailOn(Pass):
    """Raise a PassError for modules whose artifact directory or function names contain ``when``."""

    name = "test_fail"
    version = "1"

    when: str = option("bad", "substring that makes the pass fail")
    litter: bool = option(False, "write a file into the artifact directory first (as a staging pass would)")
    internal: bool = option(False, "raise a RuntimeError (a bug) instead of a PassError")

    def run(self, module: Module):
        # the artifact directory's own name holds the kernel's (the path above it is the test's tmp dir)
        names = [os.path.basename(module.artifact_dir)] + [f.name for f in module.functions]
        if any(self.when and self.when in n for n in names):
            if self.litter and module.artifact_dir:
                os.makedirs(module.artifact_dir, exist_ok=True)
                with open(os.path.join(module.artifact_dir, "litter.txt"), "w") as fh:
                    fh.write("half-done")
            if self.internal:
                raise RuntimeError("test_fail: simulated bug")
            raise PassError(f"test_fail: refusing module {os.path.basename(module.artifact_dir) or '?'}")
        return module.copy(), {}


@dataclass(frozen=True)
class FailOnKernel(FailOn):
    """:class:`FailOn` for the kernels whose artifact directory contains ``when`` (a pass sees its artifact
    directory only when it reads files, as translate does)."""

    name = "test_fail_kernel"
    reads_files = True


@dataclass(frozen=True)
class Raise(Pass):
    """Raise an exception of class ``exception`` (a builtin or a tusk.ir.errors name) for modules whose
    artifact directory contains ``when``: how the build copes with whatever a pass may throw."""

    name = "test_raise"
    version = "1"
    reads_files = True  # it picks its victims by artifact directory, which only such passes see

    exception: str = option("ValueError", "exception class to raise")
    when: str = option("bad", "substring of the artifact directory that makes the pass raise")

    def run(self, module: Module):
        if self.when and self.when in os.path.basename(module.artifact_dir):
            raise make_exception(self.exception, f"{self.name}: simulated {self.exception}")
        return module.copy(), {}


@dataclass(frozen=True)
class BreakRefs(Pass):
    """Point the first operand of every function at a memory location that does not exist: output the
    verifier refuses (a pass with a bug)."""

    name = "test_break_refs"
    version = "1"

    def run(self, module: Module):
        out = module.copy()
        for fn in out.functions:
            if len(fn.operands):
                fn.operands["memloc"][0] = len(fn.memlocs) + 7
        return out, {}


def make_exception(name: str, message: str) -> BaseException:
    import builtins

    from tusk.ir import errors

    cls = getattr(errors, name, None) or getattr(builtins, name)
    return cls(message)


@dataclass(frozen=True)
class ExpandBirKernel(Pass):
    """A stand-in for translate_nki_ast_to_bir on BIR-JSON kernels: replace the host by the kernel.

    The result is the kernel file's function for the module's core, with the
    host's attributes and artifact directory.  Only what the build tests
    need; the real pass lives in stages/.
    """

    name = "test_expand"
    version = "1"
    reads_files = True  # the kernel file its placeholder names

    def run(self, module: Module):
        from tusk.ir import bir_json
        from tusk.ir.enums import FnKind
        from tusk.stages.host import placeholders

        path = None
        for fn, i in placeholders(module):
            attrs = fn.record(fn.insts.get("attrs", i))
            if attrs.get("kernel_format") == "bir":
                path = attrs.get("klir_binary")
        if path is None:  # KLR kernels are left to the real pass
            return module.copy(), {"expanded": 0}
        kernel = bir_json.load(path)
        fns = [f for f in kernel.functions if f.kind != FnKind.NKI]
        core = module.neuron_core_id or 0
        out = Module([fns[core].copy()], module.arch, module.version, module.attributes, module.artifact_dir)
        return out, {"expanded": 1}


@dataclass(frozen=True)
class EagerSplitUnroll(Unroll):
    """Unroll that cuts even a small function into parts (the thresholds of a 1M-instruction kernel, scaled)."""

    name = "test_unroll_eager_split"
    split_min = 2
    split_part_size = 40
    split_max_parts = 6


TEST_REGISTRY = {
    "test_scale": f"{HERE}:Scale",
    "test_count": f"{HERE}:Count",
    "test_identity": f"{HERE}:Identity",
    "test_per_function": f"{HERE}:PerFunction",
    "test_sleep": f"{HERE}:Sleep",
    "test_spin": f"{HERE}:Spin",
    "test_fail": f"{HERE}:FailOn",
    "test_fail_kernel": f"{HERE}:FailOnKernel",
    "test_expand": f"{HERE}:ExpandBirKernel",
    "test_raise": f"{HERE}:Raise",
    "test_break_refs": f"{HERE}:BreakRefs",
    "test_unroll_eager_split": f"{HERE}:EagerSplitUnroll",
}


# ---------------------------------------------------------------------- helpers for build tests


def pipeline_toml(*steps: tuple[str, dict]) -> str:
    """A --pipeline file naming test passes by import path (works in subprocesses and on workers)."""
    lines = []
    for name, opts in steps:
        target = TEST_REGISTRY.get(name, name)
        lines.append("[[step]]")
        lines.append(f'pass = "{target}"')
        if opts:
            body = ", ".join(f"{k} = {_toml(v)}" for k, v in opts.items())
            lines.append(f"options = {{ {body} }}")
        lines.append("")
    return "\n".join(lines)


def _toml(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return f'"{v}"'
    return repr(v)


def write_kernels(directory, count: int, *, tiles: int = 2, prefix: str = "k") -> list:
    """``count`` BIR-JSON kernels (tiled exp programs of different sizes) in ``directory``."""
    from pathlib import Path

    from tests.programs import tiled_exp_module
    from tusk.ir import bir_json

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for k in range(count):
        p = directory / f"{prefix}{k}.json"
        bir_json.save(tiled_exp_module(tiles=tiles + k), p)
        paths.append(p)
    return paths


def flip_a_byte(object_dir) -> str:
    """Damage a stored object: flip one byte in the middle of its largest data chunk."""
    import os

    chunks = []
    for dirpath, _dirs, files in os.walk(object_dir):
        for f in files:
            if f != "zarr.json":
                chunks.append(os.path.join(dirpath, f))
    target = max(chunks, key=os.path.getsize)
    data = bytearray(open(target, "rb").read())
    data[len(data) // 2] ^= 0xFF
    with open(target, "wb") as fh:
        fh.write(bytes(data))
    return target
