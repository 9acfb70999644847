"""The grid of a sweep: typed values, product and zip, and every bad grid one line."""

from __future__ import annotations

import pytest

from torchx_nb.grid import MAX_POINTS, BadGrid, Grid, env_name, env_value, typed


def test_values_are_typed_from_their_literals() -> None:
    assert [typed(v) for v in ["3", "-2", "0.1", "1e-3", ".5", "true", "False", "x", "'7'"]] == [
        3,
        -2,
        0.1,
        0.001,
        0.5,
        True,
        False,
        "x",
        "7",
    ]
    assert isinstance(typed("3"), int) and isinstance(typed("3.0"), float)
    assert env_value(True) == "true" and env_value(0.1) == "0.1"
    assert env_name("lr") == "TORCHX_PARAM_LR"


def test_product_is_in_order_the_last_list_fastest_and_zip_pairs() -> None:
    grid = Grid.of(["lr=0.1,0.01", "layers=1,2,3"])
    assert len(grid) == 6
    assert grid.points()[:4] == [
        {"lr": 0.1, "layers": 1},
        {"lr": 0.1, "layers": 2},
        {"lr": 0.1, "layers": 3},
        {"lr": 0.01, "layers": 1},
    ]
    zipped = Grid.of({"a": [1, 2], "b": ["x", "y"]}, zipped=True)
    assert zipped.points() == [{"a": 1, "b": "x"}, {"a": 2, "b": "y"}]


@pytest.mark.parametrize(
    ("params", "zipped", "message"),
    [
        ([], False, "a sweep needs at least one parameter"),
        (["lr"], False, "-p 'lr': expected NAME=V1,V2"),
        (["lr="], False, "-p lr: an empty value in ''"),
        (["lr=0.1,,0.2"], False, "-p lr: an empty value"),
        (["2x=1"], False, "-p '2x': a parameter name must be a Python identifier"),
        (["class=1"], False, "must be a Python identifier"),
        (["na me=1"], False, "must be a Python identifier"),
        (["lr=1", "lr=2"], False, "-p lr is given twice"),
        (["a=1,2", "b=1"], True, "--zip pairs lists of one length; these differ (a: 2, b: 1)"),
        ({"a": []}, False, "-p a has no values"),
        ({"a": [[1]]}, False, "is not an int, float, bool or str"),
        (["__builtins__=1"], False, "-p __builtins__: names with two underscores on each side"),
        ({"__name__": [1]}, False, "-p __name__: names with two underscores on each side"),
        (["state=1,2"], False, "-p state: 'state' is a column of the sweep's results"),
        ({"result": [1]}, False, "'result' is a column of the sweep's results"),
        (["handle=a"], False, "'handle' is a column"),
        (["trial=1"], False, "'trial' is a column"),
        (["exit_code=1"], False, "'exit_code' is a column"),
        (["error=1"], False, "'error' is a column"),
    ],
)
def test_bad_grids_are_one_line(params: object, zipped: bool, message: str) -> None:
    with pytest.raises(BadGrid) as info:
        Grid.of(params, zipped)  # type: ignore[arg-type]
    assert message in str(info.value) and "\n" not in str(info.value)


def test_a_grid_over_the_limit_is_refused() -> None:
    values = ",".join(str(i) for i in range(40))
    with pytest.raises(BadGrid, match=f"the grid has 1600 points, over the limit of {MAX_POINTS}"):
        Grid.of([f"a={values}", f"b={values}"])
    assert len(Grid.of([f"a={values}", f"b={values}"], zipped=True)) == 40


@pytest.mark.parametrize("zipped", [False, True])
def test_an_array_task_finds_its_point_from_the_lists_alone(zipped: bool) -> None:
    """A native array's tasks receive the grid's names and lists (``Grid.spec``), not its
    points: the cell runner picks task i's point, the same as ``Grid.points()[i]``, and the
    variable stays small where the points would not fit an AWS Batch job definition."""
    import json

    from torchx_nb.apps.cell_main import grid_point

    lists = {
        "lr": [0.1, 0.01, 0.001, 1e-4],
        "layers": [1, 2, 3, 4],
        "act": ["relu", "gelu", "x", "y"],
    }
    grid = Grid.of(lists, zipped=zipped)
    spec = json.loads(json.dumps(grid.spec()))
    assert [grid_point(spec, i) for i in range(len(grid))] == grid.points()
    with pytest.raises(RuntimeError, match="outside the grid's"):
        grid_point(spec, len(grid))
    big = Grid.of({"learning_rate": [i / 1000 for i in range(1, 41)], "batch": list(range(25))})
    assert len(big) == MAX_POINTS
    assert len(json.dumps(big.spec())) < 1024 < 24 * 1024 < len(json.dumps(big.points()))
