"""``python -m tusk`` runs the ``tusk`` command line."""

from tusk.workflows.cli import main

main()
