"""User regular expressions (``--regex``, the REST API's and the panel's log filter): RE2,
one line naming the problem for anything RE2 refuses."""

from __future__ import annotations

import pytest

from torchx_nb.user_regex import BadRegex, compile_regex


def test_a_pattern_with_a_byte_that_is_not_utf8_is_one_line() -> None:
    """A lone surrogate (``$'\\xff'`` from a shell, kept by surrogateescape, or from a JSON
    body's ``\\udcff``) made RE2 raise UnicodeEncodeError past the one-line mapping."""
    with pytest.raises(BadRegex) as info:
        compile_regex("err\udcffor")
    assert str(info.value) == (
        "regular expression 'err\\udcffor' holds a byte that is not UTF-8: give the pattern"
        " as UTF-8 text"
    )
    assert compile_regex("err.r").search("error")
