"""Transpose the 2D matrix flattened into each partition's free axis (the NKI "Transpose2D" tutorial).

Each row of ``in_tensor`` holds a row-major [F1, F2] matrix; the kernel
rewrites it as the row-major [F2, F1] matrix.  No engine moves data across
partitions: one SBUF-to-SBUF copy reads with one 3D access pattern and
writes with another.
"""

import neuronxcc.nki as nki
import neuronxcc.nki.language as nl


@nki.jit
def tensor_transpose2D_kernel_(in_tensor, shape2D=(32, 16)):
    """out_tensor[p, j * F1 + i] = in_tensor[p, i * F2 + j] with (F1, F2) = shape2D; in_tensor is [P <= 128, F1*F2]."""
    out_tensor = nl.ndarray(in_tensor.shape, dtype=in_tensor.dtype, buffer=nl.shared_hbm)
    sz_p, sz_f = in_tensor.shape
    sz_f1, sz_f2 = shape2D
    assert sz_f1 * sz_f2 == sz_f, "shape2D must cover the free axis"

    # HBM -> SBUF, the whole tensor in one tile
    in_tile = nl.load(in_tensor)

    # three index tiles: the partition index and one per free axis of the 2D matrix
    i_p0 = nl.arange(sz_p)[:, None, None]
    i_f1 = nl.arange(sz_f1)[None, :, None]
    i_f2 = nl.arange(sz_f2)[None, None, :]

    # the read walks the [F1, F2] matrix row-major; the write lays the same elements out as [F2, F1]
    out_tile = nl.ndarray(shape=(sz_p, sz_f2 * sz_f1), dtype=out_tensor.dtype, buffer=nl.sbuf)
    out_tile[i_p0, i_f2 * sz_f1 + i_f1] = nl.copy(in_tile[i_p0, i_f1 * sz_f2 + i_f2])

    nl.store(out_tensor, value=out_tile)
    return out_tensor
