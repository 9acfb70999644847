"""``python -m torchx_nb.cli``: the ``torchx-nb`` command."""

from torchx_nb.cli import command

command()
