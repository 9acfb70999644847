"""``import torchx_nb`` (and loading the extension's module) stays light."""

from __future__ import annotations

import subprocess
import sys

HEAVY = [
    "pandas",
    "boto3",
    "botocore",
    "docker",
    "google",
    "kubernetes",
    "ipywidgets",
    "sagemaker",
    "numpy",
    "IPython",
]


def test_import_is_light() -> None:
    code = (
        "import sys, torchx_nb, torchx_nb.specs, torchx_nb.runner; "
        f"print([m for m in {HEAVY!r} if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
