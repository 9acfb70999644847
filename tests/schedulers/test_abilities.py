"""Abilities, not probes: a backend's options type is stated once, as its ``Scheduler``
generic parameter, and found there; what the runner needs from the options of one backend
(SageMaker's metric definitions) comes through an ability, never an attribute looked up by
name."""

from __future__ import annotations

import ast
import dataclasses
import typing
from pathlib import Path
from typing import Any

from torchx_nb import specs
from torchx_nb.schedulers import get_scheduler_factories
from torchx_nb.schedulers.abilities import DefinesMetrics, TakesTypedOptions
from torchx_nb.schedulers.api import Scheduler
from torchx_nb.specs.structured_opts import StructuredOpts

SCHEDULERS = Path(__file__).parents[2] / "torchx_nb" / "schedulers"


def _generic_parameter(cls: type) -> Any:
    for klass in cls.__mro__:
        for base in klass.__dict__.get("__orig_bases__", ()):
            if typing.get_origin(base) is Scheduler:
                return typing.get_args(base)[0]
    return None


BACKENDS = [
    "torchx_nb.schedulers.local_cwd:LocalCwdScheduler",
    "torchx_nb.schedulers.local_docker:LocalDockerScheduler",
    "torchx_nb.schedulers.aws_batch:AwsBatchScheduler",
    "torchx_nb.schedulers.aws_sagemaker:AwsSageMakerScheduler",
    "torchx_nb.schedulers.gcp_batch.scheduler:GcpBatchScheduler",
    "torchx_nb.schedulers.slurm.scheduler:SlurmScheduler",
    "torchx_nb.schedulers.kubernetes.scheduler:KubernetesScheduler",
]


def test_each_backends_options_type_is_its_generic_parameter() -> None:
    import importlib

    assert len(BACKENDS) == len(get_scheduler_factories())
    for where in BACKENDS:
        module, _, name = where.partition(":")
        cls = getattr(importlib.import_module(module), name)
        assert issubclass(cls, TakesTypedOptions)
        assert isinstance(cls.opts_type, type) and issubclass(cls.opts_type, StructuredOpts)
        assert cls.opts_type is _generic_parameter(cls), where


def test_no_backend_states_its_options_type_a_second_time() -> None:
    """Neither ``opts_type = X`` nor ``TakesTypedOptions[X]`` beside ``Scheduler[X]``."""
    again = []
    for path in SCHEDULERS.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "opts_type" for t in node.targets
            ):
                again.append(f"{path.name}:{node.lineno}")
            if (
                isinstance(node, ast.Subscript)
                and isinstance(node.value, ast.Name)
                and node.value.id == "TakesTypedOptions"
            ):
                again.append(f"{path.name}:{node.lineno}")
    assert again == []


@dataclasses.dataclass
class _Opts(StructuredOpts):
    queue: str = "q"
    """where the job waits"""


class _Third(TakesTypedOptions, Scheduler[_Opts]):
    """A third party's backend: it names its options type once."""

    def schedule(self, dryrun_info: Any) -> str:
        return "id"

    def _submit_dryrun(self, app: specs.AppDef, cfg: _Opts) -> Any:
        return specs.AppDryRunInfo({"queue": cfg.queue}, str)

    def describe(self, app_id: str) -> Any:
        return None

    def list(self, cfg: Any = None) -> list[Any]:
        return []

    def _cancel_existing(self, app_id: str) -> None:
        pass


def test_a_third_party_backend_names_its_options_once() -> None:
    sched = _Third("third", "s")
    assert _Third.opts_type is _Opts
    assert "queue" in dict(sched.run_opts())
    assert sched.resolve_opts({"queue": "gpu"}) == _Opts(queue="gpu")


def test_sagemaker_gives_its_metric_definitions_through_the_ability() -> None:
    from torchx_nb.schedulers.aws_sagemaker import AwsSageMakerScheduler

    sched = AwsSageMakerScheduler("torchx", client=object())
    assert isinstance(sched, DefinesMetrics)
    opts = sched.resolve_opts(
        {"role": "r", "instance_type": "ml.m5.large", "metric_definitions": "loss:loss=(.+)"}
    )
    assert sched.metric_definitions(opts) == {"loss": "loss=(.+)"}


def test_the_runner_reads_no_option_by_name() -> None:
    source = (SCHEDULERS.parent / "runner" / "requests.py").read_text()
    assert 'getattr(self.opts, "metric_definitions"' not in source


@dataclasses.dataclass
class _Needs(StructuredOpts):
    queue: str
    """required: where the job waits"""

    priority: int = 0
    """its priority"""


class _Listing(TakesTypedOptions, Scheduler[_Needs]):
    def schedule(self, dryrun_info: Any) -> str:
        return "id"

    def _submit_dryrun(self, app: specs.AppDef, cfg: _Needs) -> Any:
        return specs.AppDryRunInfo({}, str)

    def describe(self, app_id: str) -> Any:
        return None

    def list(self, cfg: Any = None) -> list[Any]:
        return [dict(self.given_opts(cfg))]

    def _cancel_existing(self, app_id: str) -> None:
        pass


def test_a_partial_resolution_is_only_what_was_given() -> None:
    """``list`` and previews read the options given, as a mapping (its own type: a required
    option may be missing, no default is filled in); the full options are never built with
    None in a field that always holds a value."""
    sched = _Listing("listing", "s")
    assert sched.list() == [{}]
    assert sched.list({"priority": "3"}) == [{"priority": 3}], "cast to its type"
    assert sched.list(_Needs(queue="gpu")) == [{"priority": 0, "queue": "gpu"}]


@dataclasses.dataclass
class _MoreQueues(_Opts):
    region: str = "north"
    """where the queues are"""


def test_a_backend_written_to_the_earlier_form_still_loads() -> None:
    """``TakesTypedOptions[X]`` and ``opts_type = X`` (how backends named their options
    before the type was found on ``Scheduler[X]``): the class is made (it was a TypeError at
    import, 'TakesTypedOptions' is not a generic class) and its options are X."""

    class Earlier(TakesTypedOptions[_Opts], Scheduler[_Opts]):
        opts_type = _Opts
        schedule = _Third.schedule
        _submit_dryrun = _Third._submit_dryrun
        describe = _Third.describe
        list = _Third.list
        _cancel_existing = _Third._cancel_existing

    assert Earlier.opts_type is _Opts
    assert Earlier("earlier", "s").resolve_opts({"queue": "gpu"}) == _Opts(queue="gpu")


def test_a_subclass_that_states_its_options_type_keeps_it() -> None:
    """A subclass of a backend adding options of its own (``opts_type = MoreOpts``): its
    type, and its subclasses', not the base's ``Scheduler[X]`` parameter (that silently
    overwrote it, so its options were unknown)."""

    class More(_Third):
        opts_type = _MoreQueues

    class EvenMore(More):
        pass

    for cls in (More, EvenMore):
        assert cls.opts_type is _MoreQueues, cls
        sched = cls("more", "s")
        assert "region" in dict(sched.run_opts())
        assert sched.resolve_opts({"region": "south"}, strict=True) == _MoreQueues(region="south")
    assert _Third.opts_type is _Opts


def test_backends_receive_their_options_resolved_and_never_resolve_them() -> None:
    """Options are resolved once, by the Runner or TorchX's entry points in ``api.py`` (the
    one adapter); no backend calls ``resolve_opts`` itself."""
    calls = []
    for path in SCHEDULERS.rglob("*.py"):
        if path.name == "api.py" and path.parent == SCHEDULERS:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and node.attr == "resolve_opts":
                calls.append(f"{path.relative_to(SCHEDULERS)}:{node.lineno}")
    assert calls == []


def test_submit_called_torchx_s_way_resolves_the_dict_once() -> None:
    """``submit(app, {...})`` resolves the mapping once and the backend's ``_submit_dryrun``
    receives that very object (it was resolved a second time inside ``submit_dryrun``)."""
    seen: list[Any] = []

    class Counting(_Third):
        def resolve_opts(self, cfg: Any, strict: bool = False) -> _Opts:
            seen.append(cfg)
            return super().resolve_opts(cfg, strict)

        def _submit_dryrun(self, app: specs.AppDef, cfg: _Opts) -> Any:
            seen.append(cfg)
            return super()._submit_dryrun(app, cfg)

    app = specs.AppDef("a", [specs.Role("r", "img", entrypoint="true")])
    assert Counting("third", "s").submit(app, {"queue": "gpu"}) == "id"
    assert seen == [{"queue": "gpu"}, _Opts(queue="gpu")]


def test_only_what_was_given_has_no_partial_options_object() -> None:
    """The partial resolution is ``given()``'s mapping: ``from_cfg`` always builds complete
    options (a required one missing is an error, never a None in a ``str`` field)."""
    import pytest

    assert _Needs.given({"priority": "3"}) == {"priority": 3}
    with pytest.raises(specs.InvalidRunConfigException, match="queue"):
        _Needs.from_cfg({"priority": "3"})
    with pytest.raises(TypeError):
        _Needs.from_cfg({}, partial=True)  # type: ignore[call-arg]
