"""NKI 0.7.0's tile grids: ``nl.tiles(source, tile_shape=...)`` and ``nl.alloc_tiles(...)``, an
:class:`NkiTileGrid` over a tensor, indexed by tile coordinates.

Tile ``(i, j)`` of a ``(tp, tf)`` grid is ``source[i*tp:(i+1)*tp, j*tf:(j+1)*tf]``, the final tile of a
dimension clamped to the source's extent (NKI: "partial final tiles are retained and clamped").  An int
index consumes its grid axis, a slice (step 1) keeps it; the grid stays a grid (``g[i, j]`` is a one-tile
grid), and ``.data`` is the selected region as one tensor view, ``.element_shape`` its extent.  Creating and
indexing a grid records nothing: only ``.data`` used by an instruction does.

What Tusk takes of it: a ``tile_shape`` for every dimension of the source (NKI also leaves a leading prefix of
HBM dimensions untiled, indexed a slab at a time: refused, as are ``tile_shape=None``, grids of grids,
``nl.blocks`` / ``nl.alloc_blocks`` and the attributes ``index_step_elements`` / ``is_remainder``).
"""

from __future__ import annotations

import math
from typing import Any

from tusk.frontend.affine import Affine
from tusk.frontend.errors import unsupported
from tusk.frontend.nki import language as nl
from tusk.frontend.tensors import Tensor, View

__all__ = ["NkiGrid", "NkiTileGrid", "alloc_tiles", "tiles"]


def _int(x: Any, what: str) -> int:
    if isinstance(x, Affine):  # a loop index: its loop unrolls (the selection is static)
        return int(x)
    if isinstance(x, bool) or not isinstance(x, int):
        raise unsupported(f"{what} {x!r} (a Python int)")
    return int(x)


def _shape(x: Any, what: str) -> tuple[int, ...]:
    if not isinstance(x, (tuple, list)) or not x:
        raise unsupported(f"{what}={x!r} (a tuple of positive ints)")
    out = tuple(_int(v, what) for v in x)
    if any(v <= 0 for v in out):
        raise unsupported(f"{what}={x!r} (a tuple of positive ints)")
    return out


class NkiGrid:
    """The common type of NKI's tile and block grids (``isinstance(g, nl.NkiGrid)``)."""


class NkiTileGrid(NkiGrid):
    """A view of ``source`` in tile coordinates: per source dimension the tiles ``[lo, hi)`` it selects and
    whether that grid axis is still there (a slice) or was consumed (an int)."""

    def __init__(self, source: View, tile_shape: tuple[int, ...], sel: tuple[tuple[int, int, bool], ...]) -> None:
        self._source, self._tile, self._sel = source, tile_shape, sel

    # ------------------------------------------------------------------ geometry
    @property
    def shape(self) -> tuple[int, ...]:
        """Tiles along each grid axis still there."""
        return tuple(hi - lo for lo, hi, kept in self._sel if kept)

    @property
    def tile_shape(self) -> tuple[int, ...]:
        return self._tile

    def _bounds(self) -> list[tuple[int, int]]:
        return [(lo * t, min(hi * t, n)) for (lo, hi, _), t, n in zip(self._sel, self._tile, self._source.shape)]

    @property
    def element_shape(self) -> tuple[int, ...]:
        """The selected elements along each source dimension (a final tile clamped)."""
        return tuple(b - a for a, b in self._bounds())

    @property
    def data(self) -> View:
        """The whole selection as one tensor view (a box of the source)."""
        return self._source[tuple(slice(a, b) for a, b in self._bounds())]

    @property
    def is_data_representable(self) -> bool:
        return True  # every selection Tusk makes is a box of the source, which .data is exactly

    @property
    def dtype(self) -> Any:
        return self._source.dtype

    @property
    def buffer(self) -> Any:
        return {"sbuf": nl.sbuf, "psum": nl.psum, "shared_hbm": nl.shared_hbm}.get(self._source.memory, nl.hbm)

    def __len__(self) -> int:
        return self.shape[0] if self.shape else 0

    def __repr__(self) -> str:
        return f"<nl.NkiTileGrid of {self._source.tensor.name}: shape {self.shape}, tile_shape {self._tile}>"

    # ------------------------------------------------------------------ indexing
    def __getitem__(self, key: Any) -> NkiTileGrid:
        key = key if isinstance(key, tuple) else (key,)
        kept = [d for d, (_, _, k) in enumerate(self._sel) if k]
        if Ellipsis in key:
            at = key.index(Ellipsis)
            key = key[:at] + (slice(None),) * (len(kept) - len(key) + 1) + key[at + 1:]
        if len(key) > len(kept):
            raise unsupported(f"{len(key)} indices of a tile grid of shape {self.shape}")
        sel = list(self._sel)
        for d, k in zip(kept, key):
            lo, hi, _ = sel[d]
            n = hi - lo
            if isinstance(k, slice):
                if k.step not in (None, 1):
                    raise unsupported(f"a tile grid sliced with step {k.step!r} (Tusk takes step 1)")
                start, stop, _ = slice(*(None if v is None else _int(v, "a tile-grid slice bound")
                                         for v in (k.start, k.stop))).indices(n)
                sel[d] = (lo + start, lo + max(start, stop), True)
            else:
                i = _int(k, "a tile-grid index")
                if not -n <= i < n:
                    raise unsupported(f"tile index {i} of a grid axis of {n} tiles")
                i %= n
                sel[d] = (lo + i, lo + i + 1, False)
        return NkiTileGrid(self._source, self._tile, tuple(sel))

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        raise unsupported(f"NkiTileGrid.{name} (Tusk's tile grids have shape, tile_shape, element_shape, data, "
                          "dtype, buffer and is_data_representable)")


def tiles(source: Any, *, tile_shape: Any = None) -> NkiTileGrid:
    """``nl.tiles(source, tile_shape=...)``: ``source`` as a grid of tiles (a view: it records nothing)."""
    if isinstance(source, NkiGrid):
        raise unsupported("nl.tiles of a tile or block grid (Tusk tiles a tensor)")
    if isinstance(source, Tensor):
        source = source._user_view()
    if not isinstance(source, View):
        raise unsupported(f"nl.tiles of {type(source).__name__} (a tensor)")
    if tile_shape is None:
        raise unsupported("nl.tiles without tile_shape (Tusk needs the tile shape)")
    tile = _shape(tile_shape, "nl.tiles tile_shape")
    if len(tile) < 2 or len(tile) > source.ndim:
        raise unsupported(f"nl.tiles tile_shape={tile_shape!r} of a {list(source.shape)} tensor (at least two "
                          "dimensions, at most the tensor's)")
    if len(tile) != source.ndim:
        raise unsupported(f"nl.tiles tile_shape={tile_shape!r} of a {list(source.shape)} tensor (Tusk tiles every "
                          "dimension: a leading untiled prefix, indexed a slab at a time, is not supported)")
    sel = tuple((0, math.ceil(n / t), True) for n, t in zip(source.shape, tile))
    return NkiTileGrid(source, tile, sel)


def alloc_tiles(*, tile_shape: Any, element_shape: Any, buffer: Any, dtype: Any, address: Any = None,
                name: str = "") -> NkiTileGrid:
    """``nl.alloc_tiles(...)``: a new tensor of ``element_shape`` as a tile grid (``address=`` is ignored).

    The tensor is uninitialized, as ``nl.ndarray``'s; Tusk places every tile itself."""
    shape = _shape(element_shape, "nl.alloc_tiles element_shape")
    t = nl.ndarray(shape, dtype=dtype, buffer=buffer, name=name)
    return tiles(t, tile_shape=tile_shape)
