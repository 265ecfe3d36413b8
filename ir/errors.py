"""Errors, sorted by who is at fault.

Every error a user sees is a :class:`TuskError` whose text names the file
and the place in it (a JSON path, a byte offset), so that a build of many
kernels reports each failure on one line and carries on with the rest.
Which subclass it is says whose fault it is, and so what a build does:

* :class:`InputError` -- the kernel's (a malformed file, a program a pass
  refuses: :class:`FormatError`, :class:`PassError`).  That kernel fails
  with file, location and problem; the others are built and written.
  Exit code 1 (also a directory holding no kernel file).
* :class:`UsageError` -- the command's (a bad option, pipeline or
  directory).  Found before anything is built; exit code 2.
* :class:`EnvError` -- the machine's (the store, the file system, the
  cluster).  The kernel's previous output is kept; the build reports it
  once; exit code 2.
* :class:`InternalError` -- Tusk's (any other exception in a pass or a
  reader: a bug).  One line naming pass, kernel and cause; the traceback
  goes to the build's log file; the other kernels finish.  Exit code 1.

:class:`VerifyError` (an IR invariant broken) is the kernel's when the
verifier checks a kernel as read, Tusk's when it checks a pass's output.

:class:`TuskError` itself cannot be raised (a TypeError): every raise says
whose fault it is, and :func:`fault_of` is the one rule that reads it --
the build's tasks, the kernel reader and the command line all ask it.
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
        if type(self) is TuskError:
            # the base says nothing about whose fault it is, so fault_of could only guess
            raise TypeError("TuskError is the base class: raise its fault class (InputError, FormatError, "
                            "PassError, VerifyError, UsageError, EnvError or InternalError)")
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


class InputError(TuskError):
    """The kernel's fault: its file or its program."""


class FormatError(InputError):
    """Malformed kernel file (BIR-JSON, KLR); a bad pipeline or tusk.toml is the command's (UsageError)."""


class PassError(InputError):
    """A pass cannot proceed on this program; the message keeps the backend's wording."""


class VerifyError(TuskError):
    """An IR invariant does not hold (raised by ir.verify)."""


class UsageError(TuskError):
    """The command's fault: an option, a pipeline, a directory that cannot be used as asked."""


class EnvError(TuskError):
    """The environment's fault: the store, the file system or the cluster failed."""


class InternalError(TuskError):
    """Tusk's fault: an unexpected exception (a bug), reported with where it happened."""


#: fault names used in reports, by class
INPUT, USAGE, ENVIRONMENT, INTERNAL = "input", "usage", "environment", "internal"


def fault_of(e: BaseException, *, kernel: bool = False, read: bool = False) -> str:
    """Whose fault ``e`` is (see the module docstring); OSError is the environment's, anything else a bug.

    ``kernel``: ``e`` failed one kernel of a build, which starts only once the
    command has been checked, so a UsageError then (an option that kernel's
    program cannot take, its tusk.toml table) is that kernel's.  ``read``:
    ``e`` was raised bringing the kernel in (a reader, a pass that
    ``reads_files``), so a broken invariant (VerifyError) is the kernel's,
    not a pass's.
    """
    if isinstance(e, InputError) or (kernel and isinstance(e, UsageError)) or (read and isinstance(e, VerifyError)):
        return INPUT
    if isinstance(e, UsageError):
        return USAGE
    if isinstance(e, (EnvError, OSError)):
        return ENVIRONMENT
    return INTERNAL


#: exit code by fault (README): 1 a kernel (or the file shown) is at fault, or Tusk; 2 the command or the machine
EXIT_CODES = {INPUT: 1, INTERNAL: 1, USAGE: 2, ENVIRONMENT: 2}
