"""``python -m tusk`` runs the ``tusk`` command line."""

from tusk.workflows.entry import command

command()
