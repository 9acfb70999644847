from __future__ import annotations

import pytest

from torchx_nb.workspace.ignore import Matcher, parse_patterns


def excluded(patterns: list[str], path: str) -> bool:
    return Matcher(parse_patterns(patterns)).excluded_by(path) is not None


@pytest.mark.parametrize(
    ("patterns", "path", "expected"),
    [
        (["*.md"], "README.md", True),
        (["*.md"], "docs/README.md", False),  # * never crosses /
        (["**/*.md"], "docs/deep/README.md", True),
        (["**/*.md"], "README.md", True),
        (["*/temp*"], "somedir/temporary.txt", True),  # Docker's documented examples
        (["*/*/temp*"], "somedir/subdir/temporary.txt", True),
        (["temp?"], "temp1", True),
        (["temp?"], "temp12", False),
        (["build"], "build/out/x.o", True),  # a parent directory matching excludes the file
        (["/build"], "build/x", True),
        (["./build"], "build/x", True),
        (["*.md", "!README.md"], "README.md", False),
        (["*.md", "!README*.md", "README-secret.md"], "README-secret.md", True),
        (["*.md", "!README*.md", "README-secret.md"], "README-public.md", False),
        (["*", "!keep"], "keep", False),  # TorchX #476: include-list style
        (["*", "!keep"], "other", True),
        (["*", "!keep"], "keep/nested/file", False),
        (["data/*", "!data/keep.csv"], "data/keep.csv", False),  # TorchX #457: subdirectories
        (["data/*", "!data/keep.csv"], "data/drop.csv", True),
        (["# comment", "", "x"], "x", True),
        (["[ab].txt"], "a.txt", True),
        (["[!ab].txt"], "a.txt", False),
        (["[!ab].txt"], "c.txt", True),
        (["\\*.txt"], "*.txt", True),
        (["\\*.txt"], "a.txt", False),
    ],
)
def test_docker_semantics(patterns: list[str], path: str, expected: bool) -> None:
    assert excluded(patterns, path) is expected


def test_reinclusion_keeps_directories_walkable() -> None:
    m = Matcher(parse_patterns(["data", "!data/keep.csv"]))
    assert m.excluded_by("data") is not None
    assert m.may_reinclude_under("data")
    assert not Matcher(parse_patterns(["data", "!other/x"])).may_reinclude_under("data")
