"""Target geometry, in one place (spec §6.1).

Everything that knows how big SBUF or PSUM is, how many banks PSUM has or
how wide a partition band is reads it from here.
"""

from __future__ import annotations

from dataclasses import dataclass

PARTITIONS = 128
PSUM_BANK_BYTES = 2048
BAND_PARTITIONS = 32  # PSUM bank occupancy and SB rotation work in 32-partition bands


@dataclass(frozen=True)
class Arch:
    name: str
    level: int
    sb_bytes_per_partition: int
    sb_reserved: int
    psum_banks: int
    psum_partitions: int

    @property
    def psum_bytes_per_partition(self) -> int:
        return self.psum_banks * PSUM_BANK_BYTES

    @property
    def bands(self) -> int:
        return PARTITIONS // BAND_PARTITIONS


ARCHS: dict[str, Arch] = {
    a.name: a
    for a in (
        Arch("inferentia", 10, 0x18000, 0x4000, 4, 64),
        Arch("sunda", 20, 0x30000, 0x4000, 8, 128),
        Arch("gen3", 30, 0x38000, 0x4008, 8, 128),
        Arch("core_v4", 40, 0x40000, 0x4008, 8, 128),
    )
}
ALIASES = {"tonga": "inferentia", "inf1": "inferentia", "trainium": "sunda", "trn1": "sunda",
           "inf2": "sunda", "cayman": "gen3", "trn2": "gen3", "trn3": "core_v4"}
DEFAULT_ARCH = "gen3"


def get_arch(name: str | None) -> Arch:
    """The geometry of an arch name or alias (None means the default, gen3)."""
    key = name or DEFAULT_ARCH
    key = ALIASES.get(key, key)
    if key not in ARCHS:
        from tusk.ir.errors import TuskError

        known = ", ".join(sorted(ARCHS) + sorted(ALIASES))
        raise TuskError(f"unknown arch {name!r} (known: {known})")
    return ARCHS[key]


def band_of(partition: int) -> int:
    return partition // BAND_PARTITIONS
