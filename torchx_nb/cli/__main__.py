"""``python -m torchx_nb.cli``: the ``torchx-nb`` command."""

import sys

from torchx_nb.cli import main

sys.exit(main())
