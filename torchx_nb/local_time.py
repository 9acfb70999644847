"""The machine's time zone for showing times (epoch seconds) as local wall-clock time."""

from __future__ import annotations

from typing import Any


def local_zone() -> Any:
    """The local time zone with its rules, as pandas' ``tz_convert`` takes it: a time from
    before a daylight-saving change reads as the clock read then. (The offset of *now*, as
    ``datetime.now().astimezone().tzinfo`` gives, put a July time of a Paris machine an hour
    off when read in November.)"""
    from dateutil import tz

    return tz.tzlocal()
