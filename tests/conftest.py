"""Shared fixtures: small modules built with the builder, one per opcode family."""

from __future__ import annotations

import pytest

from tests.programs import every_family_module, tiled_exp_module


@pytest.fixture
def family_module():
    return every_family_module()


@pytest.fixture
def tiled_module():
    return tiled_exp_module()


def pytest_addoption(parser):
    parser.addoption("--update-golden", action="store_true", default=False,
                     help="rewrite tests/golden/ from tests/golden_cases.py (read the diff before committing)")
