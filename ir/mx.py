"""Shape rules of the MX (microscaling) instructions, shared by the front end, the verifier and the interpreter.

An MX scaling group is 32 values: 8 partitions x one packed element (4 values along the free axis).
Its E8M0 scale byte sits in the scale tile at the group's partition quadrant (32 partitions) plus the
group's index inside the quadrant, at the packed element's column (docs/semantics.md, MX).
"""

from __future__ import annotations

GROUP_PARTITIONS = 8
QUADRANT = 32
PACK = 4  # values per packed (_x4) element
#: packed dtype -> its unpacked element kind
PACKED = {"float8_e4m3fn_x4": "float8_e4m3fn", "float8_e5m2_x4": "float8_e5m2", "float4_e2m1fn_x4": "float4_e2m1fn"}
QUANTIZE_TARGETS = ("float8_e4m3fn_x4", "float8_e5m2_x4")  # quantize_mx writes no fp4
SCALE_DTYPES = ("uint8", "float8_e8m0fnu")


def scale_row(p: int) -> int:
    """The scale-tile partition of data partition ``p``."""
    return QUADRANT * (p // QUADRANT) + (p % QUADRANT) // GROUP_PARTITIONS


def scale_rows_needed(partitions: int) -> int:
    return scale_row(partitions - 1) + 1


def _data_partitions(what: str, p: int) -> list[str]:
    if p > 128 or p % QUADRANT and p > QUADRANT or p % GROUP_PARTITIONS:
        return [f"{what} has {p} partitions; a multiple of 8 up to 32, or of 32 up to 128"]
    return []


def _scale(what: str, scale: tuple[int, int], p: int, f: int) -> list[str]:
    need = scale_rows_needed(p)
    if scale[0] < need or scale[1] != f:
        return [f"{what} is {list(scale)}; at least {need} partitions of {f} scales (one per packed element)"]
    return []


def quantize_problems(src: tuple[int, int], dst: tuple[int, int], scale: tuple[int, int]) -> list[str]:
    """What is wrong with quantize_mx of a [P, F] source into a [P, F/4] packed tile and its scales."""
    p, f = src
    out = _data_partitions("quantize_mx src", p)
    if f % PACK:
        out.append(f"quantize_mx src has {f} elements per partition; a multiple of 4")
    if dst != (p, f // PACK):
        out.append(f"quantize_mx dst is {list(dst)}; [{p}, {f // PACK}] for a {list(src)} source")
    return out + _scale("quantize_mx dst_scale", scale, p, f // PACK)


def matmul_problems(st: tuple[int, int], mv: tuple[int, int], st_scale: tuple[int, int],
                    mv_scale: tuple[int, int], dst: tuple[int, int]) -> list[str]:
    """What is wrong with nc_matmul_mx of packed [K, M] stationary and [K, N] moving tiles."""
    out = _data_partitions("nc_matmul_mx stationary", st[0])
    if mv[0] != st[0]:
        out.append(f"nc_matmul_mx contracts {st[0]} stationary partitions with {mv[0]} moving ones")
    if st[1] > 128 or mv[1] > 512:
        out.append(f"nc_matmul_mx of {st[1]} stationary and {mv[1]} moving columns; at most 128 and 512")
    if dst != (st[1], mv[1]):
        out.append(f"nc_matmul_mx dst is {list(dst)}; [{st[1]}, {mv[1]}]")
    return (out + _scale("nc_matmul_mx stationary_scale", st_scale, st[0], st[1])
            + _scale("nc_matmul_mx moving_scale", mv_scale, mv[0], mv[1]))
