"""How the suite runs in parallel (pytest-xdist, ``--dist loadgroup``; scripts/test).

Each xdist worker is a test run of its own: its own session fixtures (dockerd, registry,
moto_server, a Slurm cluster...), ports, temporary folders and data roots, exactly as two runs
on one machine are kept apart. What is expensive to start, or holds state that a test reads
back, is used by one worker only: every test that uses such a session service is put in that
service's group (an ``xdist_group`` mark), and the tests that use a module-scoped fixture (a
Jupyter server per module, an IPython shell...) stay in their module's group, so the fixture
starts once. Every other test goes to whichever worker is free. A new test needs nothing of
its own: it asks for the fixtures it uses, and its group follows from them.

Without xdist (``-n 0``) the groups change nothing.

Every test that uses a real part the suite starts (dockerd, a registry, moto_server, the GCS
emulator, Slurm, the loopback GCP/Kubernetes servers, the kernel virtualenv, a Jupyter server,
Chromium) is marked ``real_parts``: ``-m "not real_parts"`` runs the unit tests of an area
alone (the inner loop of docs/development.md)."""

from __future__ import annotations

import pytest

# session fixture -> the group of every test that uses it (and so the one worker that starts
# it); the first match in this order wins
SERVICE_GROUPS = {
    "slurm_cluster": "slurm",
    "slurm_cluster_noacct": "slurm",
    "slurm_preempt": "slurm-preempt",
    "kube_fake": "kubernetes",
    "gcp_fake": "gcp",
    "kernel_venv": "kernel-venv",
}
# session fixtures every worker starts for itself when its tests need them (cheap to start,
# or nothing a test reads back depends on another test)
PER_WORKER = {
    "dockerd",
    "base_images",
    "registry",
    "auth_registry",
    "python_in_registry",
    "moto_server",
    "gcs_server",
    "gar_registry",
}


# fixtures that start a real part (directly or through the fixtures they use)
REAL_PARTS = {
    *SERVICE_GROUPS,
    *PER_WORKER,
    "lab",  # a Jupyter server (tests/server)
    "panel_parts",  # JupyterLab and Chromium (tests/labextension)
    "lab_parts",  # JupyterLab and Chromium (tests/notebook/test_browser.py)
}


def group_of(item: pytest.Item) -> str | None:
    """The group ``item`` runs in, or None when any worker may run it."""
    names = set(item.fixturenames)
    for fixture, group in SERVICE_GROUPS.items():
        if fixture in names:
            return group
    info = getattr(item, "_fixtureinfo", None)
    for name, defs in (info.name2fixturedefs if info else {}).items():
        if name in PER_WORKER or name not in names or not defs:
            continue
        if not getattr(defs[-1].func, "__module__", "").startswith("tests."):
            continue  # pytest's and plugins' own (tmp_path_factory...) hold no service
        scope = defs[-1].scope
        if scope in ("module", "package", "class"):
            return f"module:{item.nodeid.split('::')[0]}"
        if scope == "session":
            return f"session:{name}"
    return None


@pytest.hookimpl(tryfirst=True)  # before xdist adds the group to each test's id
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if REAL_PARTS & set(item.fixturenames):
            item.add_marker(pytest.mark.real_parts)
        group = group_of(item)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))
