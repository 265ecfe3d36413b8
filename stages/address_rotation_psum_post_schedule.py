"""address_rotation_psum_post_schedule: PSUM rings again after scheduling (seed 002).

:mod:`~tusk.stages.address_rotation_psum` on the functions ``schedule`` marked with
attribute 12 as well; the driver then rebuilds their edges and schedules them again
(:mod:`~tusk.stages.address_rotation`).
"""

from __future__ import annotations

from dataclasses import dataclass

from tusk.ir.enums import FnAttr
from tusk.stages.address_rotation_psum import AddressRotationPSUM


@dataclass(frozen=True)
class AddressRotationPSUMPostSchedule(AddressRotationPSUM):
    """address_rotation_psum_post_schedule: PSUM rings again after scheduling (attribute 12)."""

    name = "address_rotation_psum_post_schedule"

    @staticmethod
    def selects(flags: set[int]) -> bool:
        return FnAttr.KERNEL_SCOPE in flags or AddressRotationPSUM.selects(flags)
