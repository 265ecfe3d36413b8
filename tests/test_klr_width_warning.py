"""Values KLR's C++ reader would truncate (Nat beyond uint32, Int beyond int32) are written with a warning."""

from __future__ import annotations

import warnings

import pytest

from tusk.ir.klr import types as T
from tusk.ir.klr.wire import KlrWidthWarning
from tusk.ir.klr.writer import write_value


def test_int_beyond_int32_warns_once_per_write():
    with pytest.warns(KlrWidthWarning, match="Int beyond the C\\+\\+ reader's 32-bit field") as got:
        write_value("Immediate", T.Immediate_int32(1 << 40))
    assert len([w for w in got if issubclass(w.category, KlrWidthWarning)]) == 1


def test_values_in_range_write_silently():
    with warnings.catch_warnings():
        warnings.simplefilter("error", KlrWidthWarning)
        write_value("Immediate", T.Immediate_int32(-(1 << 31)))
