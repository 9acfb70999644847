"""One masking on every surface: a job that prints secret-looking text and fails with it as its
message shows none of the secrets in a real kernel's outputs, in the saved notebook file, in
the CLI's lines or in a dry run; and masking itself catches every shape of the corpus."""

from __future__ import annotations

import json
import shlex
import sys
import time
from pathlib import Path

import nbformat
import pytest

from tests import masking_corpus as corpus
from tests.conftest import cli
from torchx_nb.environment.index import mask_url
from torchx_nb.redact import MASK, redact, redact_text


@pytest.mark.parametrize(("line", "secret"), corpus.CORPUS)
def test_each_shape_is_masked(line: str, secret: str) -> None:
    shown = redact_text(line)
    assert secret not in shown and MASK in shown, shown


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("DB_PASS=hunter2", "DB_PASS=****"),
        (
            "run --password=x --api-key=y --password z --user bob",
            "run --password=**** --api-key=**** --password **** --user bob",
        ),
        ("postgres://bob:p@ss@w0rd@db:5432/x", "postgres://****@db:5432/x"),
        ("my token password=abc", "my token password=****"),
        ("the password: hunter2 and author=bob", "the password: **** and author=bob"),
        ('"password": "hunter 2"', '"password": "****"'),
        ("write them as KEY=VALUE,KEY=VALUE", "write them as KEY=VALUE,KEY=VALUE"),
        ("password reset requested; basic configuration", None),
        ("PASSWORD=${DB_PASSWORD} TOKEN=<your token>", None),
        ("monkey=banana AUTHOR=bob --token -v", None),
        ("tokens=512 token_acc: 0.93 max_tokens=4096", None),
        ("cannot find GCP credentials: no GCP credentials", None),
        ("password: changeme; secret: s3cr3t", "password: ****; secret: ****"),
        ("password=1234 PIN=0000", "password=**** PIN=****"),
    ],
)
def test_prose_and_placeholders_stay_readable(text: str, shown: str | None) -> None:
    assert redact_text(text) == (text if shown is None else shown)


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("https://gltoken123abc@gitlab.example/simple", "https://****@gitlab.example/simple"),
        (
            "PIP_INDEX_URL=https://a1b2c3d4e5f6@host/simple",
            "PIP_INDEX_URL=https://****@host/simple",
        ),
        ("git+https://u:p@ss@h.example/r.git@v1", "git+https://****@h.example/r.git@v1"),
        ("see https://h.example/a@b", None),
    ],
)
def test_url_credentials_are_masked_as_pip_masks_them(text: str, shown: str | None) -> None:
    """A lone user part may be a token (pip masks it too); the credentials end at the last
    ``@`` before the host; an ``@`` in the path is not one. One rule: the index messages'."""
    assert redact_text(text) == (text if shown is None else shown)
    assert mask_url(text) == redact_text(text)
    assert redact({"env": {"INDEX": text}}) == {"env": {"INDEX": shown or text}}


def test_a_dry_run_masks_a_token_only_url_in_env() -> None:
    url = "https://a1b2c3d4e5f6@127.0.0.1/simple"
    args = ("run", "--dryrun", "--json", "utils.sh", "--env", f"PIP_INDEX_URL={url}", "--")
    code, out, err = cli(*args, "true")
    assert code == 0, err
    assert "a1b2c3d4e5f6" not in out + err
    lines = [line.strip() for line in out.splitlines()]
    assert '"PIP_INDEX_URL": "https://****@127.0.0.1/simple",' in lines


def test_argument_lists_mask_the_value_after_a_secret_flag() -> None:
    assert redact(["train.py", *corpus.ARGS]) == [
        "train.py",
        "--password",
        MASK,
        "--api-key=" + MASK,
        "--epochs",
        "3",
    ]


def test_masking_stays_linear_on_hostile_text() -> None:
    # shapes that made a backtracking engine quadratic; the bound is generous (RE2 takes ms)
    for text in ('a="' * 200_000, 'password="' * 100_000, "x" * 1_000_000, "a://b:" * 100_000):
        start = time.process_time()
        redact_text(text)
        assert time.process_time() - start < 5.0


def test_cli_lines_show_no_secret(tmp_path: Path) -> None:
    script = tmp_path / "fail.py"
    script.write_text(corpus.failing_job_source())
    code, out, err = cli("run", "--wait", "utils.python", "--script", str(script), timeout=120)
    assert code == 1, err
    handle = out.splitlines()[0]
    texts = [out, err]
    for args in (
        ("status", handle),
        ("describe", handle),
        ("log", handle),
        ("log", f"{handle}/python/0"),
        ("list",),
    ):
        code, out, err = cli(*args)
        texts.append(out + err)
    env = ",".join(f"{k}={v}" for k, v in corpus.ENV.items())
    code, out, err = cli(
        "run", "--dryrun", "utils.sh", "--env", env, "--", "train", *corpus.ARGS, timeout=60
    )
    assert code == 0, err
    texts.append(out + err)
    everything = "\n".join(texts)
    assert corpus.leaked(everything) == [], everything
    assert "DB_PASS=****" in everything and "--password ****" in everything


def test_kernel_outputs_and_the_saved_notebook_show_no_secret(
    isolated: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.notebook.test_kernel_outputs import plain, run

    monkeypatch.setenv("TORCHX_NB_WIDGETS", "1")
    env = " ".join(f"--env {k}={v}" for k, v in corpus.ENV.items())
    source = corpus.failing_job_source()
    nb = run(
        [
            "%load_ext torchx_nb",
            f"%%torchx run --dryrun {env}\n{source}",
            f"%%torchx run -o job {env}\n{source}",
            "print(job.wait(interval=0.2).state)",
            "job",
            "%torchx status job",
            "%torchx log job",
            "%torchx describe job",
            "print(job.logs())",
            "%torchx list",
        ],
        isolated,
        allow_errors=False,
    )
    assert plain(nb.cells[3]) == "FAILED\n"
    for cell in nb.cells:
        cell.source = ""  # the cells' own code holds the secrets: only outputs are checked
    saved = isolated / "saved.ipynb"
    nbformat.write(nb, saved)
    text = saved.read_text()
    assert corpus.leaked(text) == [], [c for c in nb.cells if corpus.leaked(json.dumps(c))]
    run_cell = json.dumps(nb.cells[2].outputs)
    # the snapshot (widgets replaced by static HTML), its replica message and its log tail
    assert "application/vnd.jupyter.widget-view+json" not in run_cell
    assert "DB_PASS=****" in run_cell and "exit 3" in run_cell
    assert "--password ****" in plain(nb.cells[6])  # %torchx log
    assert "DB_PASS" in plain(nb.cells[1]) and MASK in plain(nb.cells[1])  # the dry run


def test_rest_masks_the_message_and_the_logs(tmp_path: Path) -> None:
    """The REST API on its own (JobService, as the handlers call it)."""
    from tests.conftest import shell_app
    from torchx_nb.runner import get_runner
    from torchx_nb.server.jobs import JobService

    script = tmp_path / "fail.py"
    script.write_text(corpus.failing_job_source())
    app = shell_app(f"{shlex.quote(sys.executable)} {shlex.quote(str(script))}", role="main")
    with get_runner() as runner:
        handle = runner.run(app, "local_cwd", {})
        runner.wait(handle, wait_interval=0.1, timeout=60)
    service = JobService()
    try:
        bodies = [
            service.detail(handle),
            service.logs(handle, None, 0, "combined", None, 0, 0, 0),
            service.logs(handle, "main", 0, "stdout", None, 5, 0, 0),
            service.page(None, None, None, None, 1, 50),
        ]
    finally:
        service.close()
    text = json.dumps(bodies)
    assert corpus.leaked(text) == [], text
    assert "DB_PASS=****" in text


def test_a_lone_surrogate_is_masked_around_not_raised() -> None:
    """An undecodable byte kept by the OS's surrogateescape (a file name, an environment
    value) reached RE2, which reads UTF-8 only: redact_text raised UnicodeEncodeError (found
    by the hostile fuzz test). Now the byte shows as its escape and the secret beside it is
    masked."""
    from torchx_nb.redact import mask_url, redact_text

    bad = "\udcff"
    assert redact_text(f"{bad} HF_TOKEN=abcdef123456 https://u:pw@host/x") == (
        "\\udcff HF_TOKEN=**** https://****@host/x"
    )
    assert mask_url(f"{bad} https://u:pw@host/x") == "\\udcff https://****@host/x"


def test_short_texts_are_masked_once_and_long_ones_every_time_alike() -> None:
    """Short texts are remembered (a watcher masks each job's same texts every poll); a long
    one is masked without being kept, with the same result."""
    from torchx_nb.redact import CACHED_CHARS, _redact_short, redact_text

    short = "token=s3cr3tvalue123 in a status message"
    assert redact_text(short) == redact_text(short) == "token=**** in a status message"
    assert _redact_short.cache_info().hits >= 1
    long = "x" * CACHED_CHARS + " password=hunter22"
    before = _redact_short.cache_info().currsize
    assert redact_text(long).endswith(" password=****")
    assert _redact_short.cache_info().currsize == before
