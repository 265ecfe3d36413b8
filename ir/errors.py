"""The one error type users see.

Every failure a user can cause (bad input, an over-budget unroll, a kernel
file that cannot be found) raises a :class:`TuskError` whose text names the
file and the place in it, so that a build of many kernels can report each
failure on one line and carry on with the rest.
"""

from __future__ import annotations


class TuskError(Exception):
    """A user-facing compiler error.

    ``where`` is the location inside the file: a JSON path such as
    ``functions[0].blocks[2].instructions[5].opcode`` or a byte offset such as
    ``byte 0x1f3``.  Both are optional so that pass-level errors (which have
    no file) use the same type.
    """

    def __init__(self, message: str, *, file: str | None = None, where: str | None = None):
        self.message = message
        self.file = None if file is None else str(file)
        self.where = where
        super().__init__(self.__str__())

    def __str__(self) -> str:
        head = ""
        if self.file:
            head = self.file
            if self.where:
                head += f" at {self.where}"
            head += ": "
        elif self.where:
            head = f"at {self.where}: "
        return head + self.message

    def located(self, file: str | None = None, where: str | None = None) -> "TuskError":
        """Return a copy with the file/location filled in where still unknown."""
        return type(self)(self.message, file=self.file or file, where=self.where or where)


class FormatError(TuskError):
    """Malformed input file (BIR-JSON, KLR, pipeline TOML)."""


class VerifyError(TuskError):
    """An IR invariant does not hold (raised by ir.verify)."""


class PassError(TuskError):
    """A pass cannot proceed; the message keeps the backend's wording."""
