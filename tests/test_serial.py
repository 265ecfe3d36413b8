"""Modules survive the array+JSON form the cache stores, and hash stably."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.programs import tiled_exp_module
from tusk.ir.serial import content_hash, module_from_parts, module_to_parts


def _through_json(m):
    meta, fns = module_to_parts(m)
    return module_from_parts(json.loads(json.dumps(meta)), [(a, json.loads(json.dumps(md))) for a, md in fns])


def test_parts_round_trip(family_module):
    again = _through_json(family_module)
    assert again == family_module
    assert content_hash(again) == content_hash(family_module)


def test_hash_changes_with_content():
    a, b = tiled_exp_module(tiles=4), tiled_exp_module(tiles=5)
    assert content_hash(a) != content_hash(b)
    c = tiled_exp_module(tiles=4)
    c.functions[0].operands["offset"][0] += 1
    assert content_hash(c) != content_hash(a)


def test_hash_is_stable_across_processes():
    code = "from tests.programs import tiled_exp_module; from ir.serial import content_hash; print(content_hash(tiled_exp_module()))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == content_hash(tiled_exp_module())


def test_a_module_read_back_from_its_parts_writes_the_same_bir_json():
    """Edge order is not content (the digest sorts it) but it is the order the writer lists an
    instruction's dependencies in: the store keeps it, so a cache hit writes a rebuild's bytes."""
    from tusk.ir import bir_json
    from tusk.ir.columns import Table
    from tusk.ir.module import DEP_SCHEMA
    from tusk.stages.build_fdeps import BuildFDeps
    from tusk.stages.full_unroll import FullUnroll

    m, _ = BuildFDeps().run(FullUnroll(level=2).run(tiled_exp_module())[0])
    fn = next(f for f in m.functions if len(f.deps) > 2)
    deps = fn.deps
    flipped = m.copy()
    target = next(f for f in flipped.functions if f.name == fn.name)
    target.deps = Table.from_arrays(DEP_SCHEMA, {c: deps[c][::-1].copy() for c, _ in DEP_SCHEMA})
    assert content_hash(flipped) == content_hash(m)           # the same program
    for module in (m, flipped):
        back = module_from_parts(*module_to_parts(module))
        assert bir_json.dumps(back) == bir_json.dumps(module)  # and the same bytes after the store
