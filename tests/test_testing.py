"""TorchX's ComponentTestCase, for component authors: validate and run a component."""

from __future__ import annotations

import sys
import unittest
from pathlib import Path

from torchx_nb.components import utils
from torchx_nb.testing import ComponentTestCase


def test_component_test_case(isolated: Path) -> None:
    class EchoTest(ComponentTestCase):
        def test_validate(self) -> None:
            self.validate(utils, "echo")

        def test_run(self) -> None:
            status = self.run_component(utils.echo, {"msg": "from a test"}, timeout=0.2)
            assert status is not None
            self.assertEqual("SUCCEEDED", status.state.name)

    result = unittest.TextTestRunner(stream=sys.stderr, verbosity=0).run(
        unittest.defaultTestLoader.loadTestsFromTestCase(EchoTest)
    )
    assert result.wasSuccessful(), result.failures + result.errors
