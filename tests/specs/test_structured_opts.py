from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from torchx_nb.specs import InvalidRunConfigException, StructuredOpts


@dataclass
class Opts(StructuredOpts):
    queue: str
    """The job queue."""

    share_id: str | None = None
    """Fair-share identifier."""

    priority: int = 0
    """Scheduling priority."""

    mail_user: str | None = field(default=None, metadata={"cfg_key": "mail-user"})
    """Who gets mail."""


def test_as_runopts_types_defaults_and_help() -> None:
    opts = Opts.as_runopts()
    queue = opts.get("queue")
    assert queue is not None and queue.is_required and queue.help == "The job queue."
    prio = opts.get("priority")
    assert prio is not None and prio.opt_type is int and prio.default == 0
    assert opts.get("mail-user") is not None
    assert opts.get("share_id") is not None and opts.get("share_id").opt_type is str  # type: ignore[union-attr]


def test_from_cfg_accepts_camel_case_and_cfg_keys() -> None:
    o = Opts.from_cfg({"queue": "q", "shareId": "s", "priority": "3", "mail-user": "me", "x": 1})
    assert (o.queue, o.share_id, o.priority, o.mail_user) == ("q", "s", 3, "me")
    assert o.extra == {"x": 1}
    assert o.to_cfg() == {"queue": "q", "share_id": "s", "priority": 3, "mail-user": "me", "x": 1}


def test_typed_options_are_read_by_attribute_and_adapted_once_for_torchx_code() -> None:
    """Not a mapping: code written TorchX's way gets a plain dict through ``as_cfg``."""
    from collections.abc import Mapping

    from torchx_nb.specs.structured_opts import as_cfg

    o = Opts.from_cfg({"queue": "q"})
    assert not isinstance(o, Mapping)
    with pytest.raises(TypeError):
        o["queue"]  # type: ignore[index]
    assert as_cfg(o) == {"queue": "q", "priority": 0}
    assert as_cfg({"a": 1}) == {"a": 1} and as_cfg(None) == {}
    assert o.with_(priority=2).to_cfg()["priority"] == 2


def test_from_cfg_errors() -> None:
    with pytest.raises(InvalidRunConfigException, match="missing required option 'queue'"):
        Opts.from_cfg({})
    with pytest.raises(InvalidRunConfigException, match="given twice"):
        Opts.from_cfg({"queue": "q", "share_id": "a", "shareId": "b"})


@dataclass
class NumpyDocumented(StructuredOpts):
    """Options of a backend whose class docstring is numpydoc.

    Parameters
    ----------
    queue : str
        what the class docstring says
    """

    queue: str = "q"
    """The job queue."""

    region: str = "north"
    """Where the queues are."""


@dataclass
class GoogleDocumented(StructuredOpts):
    """Options of a backend whose class docstring lists them.

    Attributes:
        queue: what the class docstring says
    """

    queue: str = "q"
    """The job queue."""


@pytest.mark.parametrize("cls", [NumpyDocumented, GoogleDocumented])
def test_the_help_is_each_fields_attribute_docstring_whatever_the_class_docstring(
    cls: type[StructuredOpts],
) -> None:
    """A numpydoc ``Parameters`` section in the class docstring hid every attribute docstring
    (no help at all), a Google ``Attributes`` section replaced them: the help is the field's
    own docstring, as runopts showed it before docstring_parser read it."""
    opts = cls.as_runopts()
    queue = opts.get("queue")
    assert queue is not None and queue.help == "The job queue."
    if cls is NumpyDocumented:
        region = opts.get("region")
        assert region is not None and region.help == "Where the queues are."
