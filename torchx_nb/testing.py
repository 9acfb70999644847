"""TorchX's ``ComponentTestCase`` (``torchx.components.component_test_base`` there; here above the
runner, which it uses): unit-test a component as the CLI will see it (``validate``) and run it
to its end (``run_component``)."""

from __future__ import annotations

import os
import shutil
import tempfile
import time
import unittest
from collections.abc import Callable
from types import ModuleType
from typing import Any

from torchx_nb.specs.api import AppDef, AppStatus


class ComponentTestCase(unittest.TestCase):
    """A TestCase with ``validate(module, fn_name)`` and ``run_component(fn, args)``."""

    def setUp(self) -> None:
        self.test_dir = tempfile.mkdtemp("torchx_component_test")
        self.old_cwd = os.getcwd()

    def tearDown(self) -> None:
        shutil.rmtree(self.test_dir, ignore_errors=True)
        os.chdir(self.old_cwd)

    def validate(self, module: ModuleType, function_name: str) -> None:
        """The component passes the linter and the CLI can build its ``--help`` (as
        ``torchx-nb run FILE.py:FN --help`` would)."""
        from torchx_nb.components.finder import get_component
        from torchx_nb.specs.builders import component_parser

        path = module.__file__
        assert path, f"module {module.__name__} has no file"
        found = get_component(f"{os.path.abspath(path)}:{function_name}")
        self.assertEqual([], found.validation_errors)
        with self.assertRaises(SystemExit):
            component_parser(found.fn, function_name).parse_args(["--help"])

    def run_component(
        self,
        component: Callable[..., AppDef],
        args: dict[str, Any] | None = None,
        scheduler_params: dict[str, Any] | None = None,
        scheduler: str = "local_cwd",
        interval: float = 0.1,
        timeout: float = 1,
    ) -> AppStatus | None:
        """Run ``component(**args)`` on ``scheduler`` and poll until it ends (at least
        ``timeout`` seconds, as TorchX's); its last status."""
        from torchx_nb.runner import get_runner

        app = component(**(args or {}))
        with get_runner(None, None, **(scheduler_params or {})) as runner:
            handle = runner.run(app, scheduler)
            elapsed = 0.0
            status = runner.status(handle)
            while (status is not None and not status.is_terminal()) or elapsed < timeout:
                time.sleep(interval)
                elapsed += interval
                status = runner.status(handle)
            return status
