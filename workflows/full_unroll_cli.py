"""`full_unroll INPUT -o OUTPUT -unrollLevel N -verbose L` (not implemented yet)."""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    print("full_unroll: the FullUnroll pass is not implemented yet (issue: loop-unroll family)", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
