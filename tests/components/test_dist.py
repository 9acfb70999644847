from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import cli
from torchx_nb.components.dist import BadJobSizeError, ddp, parse_nnodes, spmd
from torchx_nb.specs import macros


@pytest.mark.parametrize(
    ("j", "expected"),
    [
        ("2:4x8", (2, 4, 8, "2:4")),
        ("2x8", (2, 2, 8, "2")),
        ("8", (1, 1, 8, "1")),
        ("1x1", (1, 1, 1, "1")),
    ],
)
def test_parse_nnodes(j: str, expected: tuple[int, int, int, str]) -> None:
    assert parse_nnodes(j) == expected


@pytest.mark.parametrize("bad", ["", "x", "2x", "x2", "4:2x1", "0x1", "1x0", "2 x 2", "-1"])
def test_bad_j(bad: str) -> None:
    with pytest.raises(BadJobSizeError, match="bad -j"):
        parse_nnodes(bad)


def test_single_node_command() -> None:
    app = ddp("--lr", "0.1", script="train.py", j="1x2")
    role = app.roles[0]
    assert role.entrypoint == "bash" and role.args[0] == "-c"
    assert role.args[1] == (
        "torchrun --rdzv_backend c10d --rdzv_endpoint localhost:0 --rdzv_id '${app_id}'"
        " --nnodes 1 --nproc_per_node 2 --tee 3 --role ''"
        " train.py --lr 0.1"
    )
    assert (app.name, role.name, role.num_replicas, role.min_replicas) == ("train", "train", 1, 1)
    assert role.port_map == {"c10d": 29500}
    assert role.env["TORCHX_TRACKING_EXPERIMENT_NAME"] == "default-experiment"
    assert role.env["TORCHX_TRACKING_RUN_NAME"] == "train"


def test_multi_node_elastic_command_and_macros() -> None:
    app = ddp(
        m="pkg.trainer", j="2:4x8", name="exp/run1", rdzv_port=1234, rdzv_conf="a=b", debug=True
    )
    role = app.roles[0]
    cmd = role.args[1]
    assert "--rdzv_conf a=b" in cmd
    assert f"--rdzv_endpoint $${{{macros.rank0_env}:=localhost}}:1234 " in cmd
    assert "--nnodes 2:4 --nproc_per_node 8" in cmd and "--node_rank" not in cmd
    assert cmd.endswith("-m pkg.trainer")
    assert (app.name, role.name, role.min_replicas, role.num_replicas) == ("run1", "trainer", 2, 4)
    assert role.env["TORCHX_TRACKING_EXPERIMENT_NAME"] == "exp"
    assert role.env["TORCH_DISTRIBUTED_DEBUG"] == "DETAIL"
    out = macros.Values(img_root="", app_id="a1", replica_id="0", rank0_env="MAIN_HOST").apply(role)
    assert "--rdzv_endpoint ${MAIN_HOST:=localhost}:1234" in out.args[1]
    assert "--rdzv_id 'a1'" in out.args[1]


def test_exactly_one_program() -> None:
    with pytest.raises(ValueError, match="exactly one of --script or --m"):
        ddp()


def test_spmd_infers_processes_from_the_hosts_gpus_as_in_torchx() -> None:
    app = spmd(script="train.py", j="2", h="aws_p4d.24xlarge")
    cmd = app.roles[0].args[1]
    assert "--nnodes 2 --nproc_per_node 8" in cmd
    assert app.roles[0].num_replicas == 2 and app.roles[0].resource.gpu == 8
    assert "--nproc_per_node 1" in spmd(m="pkg.train").roles[0].args[1]  # gpu.small, 1x1
    with pytest.warns(UserWarning, match="4 processes per node but a aws_p4d.24xlarge has 8"):
        spmd(script="t.py", j="2x4", h="aws_p4d.24xlarge")
    with pytest.raises(BadJobSizeError, match="'aws_trn1.32xlarge' has no GPUs.*-j 2x8"):
        spmd(script="t.py", j="2", h="aws_trn1.32xlarge")
    trn = spmd("--lr", "1", script="t.py", j="2x16", h="aws_trn1.32xlarge", env={"A": "1"})
    assert "--nproc_per_node 16" in trn.roles[0].args[1] and trn.roles[0].env["A"] == "1"


def test_spmd_runs_a_real_job_on_local_cwd(tmp_path: Path) -> None:
    script = tmp_path / "rank.py"
    script.write_text(
        "import os\nprint('rank', os.environ['RANK'], 'of', os.environ['WORLD_SIZE'])\n"
    )
    code, out, err = cli(
        "run", "--workspace", "", "-s", "local_cwd", "--log", "dist.spmd",
        "-j", "1x2", "-h", "cpu.small", "--script", str(script),
    )  # fmt: skip
    assert code == 0, err
    assert "rank 0 of 2" in out + err and "rank 1 of 2" in out + err


def test_node_rank_only_for_the_static_rendezvous_and_left_for_the_shell() -> None:
    """As in TorchX: c10d assigns ranks itself; static needs the node's rank, which a scheduler
    gives as a shell variable (e.g. $AWS_BATCH_JOB_NODE_INDEX), so it is not quoted."""
    cmd = ddp(script="t.py", j="2x1", rdzv_backend="static").roles[0].args[1]
    assert cmd.startswith("torchrun --rdzv_backend static --node_rank ${replica_id} ")
    out = macros.Values(img_root="", app_id="a", replica_id="$NODE", rank0_env="H").apply(
        ddp(script="t.py", j="2x1", rdzv_backend="static").roles[0]
    )
    assert " --node_rank $NODE " in out.args[1]
