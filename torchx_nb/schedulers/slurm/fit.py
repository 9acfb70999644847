"""Whether a pending Slurm job can ever start on its partition as configured. sbatch accepts a
heterogeneous job that needs more nodes than the partition has, or a replica that asks for
more CPUs, memory or GPUs than any of its nodes, and Slurm then says only ``Resources``; here
the job's needs (remembered at submit) meet the partition's nodes (one ``sinfo`` per poll
round, only while a job waits) and the answer names what does not fit."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

_GPUS = re.compile(r"gpu(?::[^:(,]+)?:(\d+)")


@dataclass(frozen=True)
class Node:
    name: str
    cpus: int
    mem_mb: int
    gpus: int


def replica_needs(sbatch: Mapping[str, str | None]) -> dict[str, int]:
    """What one replica asks of its node, from its sbatch options."""
    gpus = sbatch.get("gpus-per-node") or sbatch.get("gpus-per-task") or "0"
    return {
        "cpus": int(sbatch.get("cpus-per-task") or 1),
        "mem_mb": int(sbatch.get("mem") or 0),
        "gpus": int(str(gpus).rsplit(":", 1)[-1] or 0),
    }


def parse_sinfo(text: str, partition: str | None) -> tuple[str, list[Node]]:
    """``sinfo -N -h --format %N|%P|%c|%m|%G``: the partition's name (the default one, marked
    ``*``, when none is given) and its nodes."""
    nodes: dict[str, Node] = {}
    name = partition or ""
    for line in text.splitlines():
        parts = line.strip().split("|")
        if len(parts) != 5:
            continue
        node, part, cpus, mem, gres = parts
        default = part.endswith("*")
        part = part.rstrip("*")
        if partition is None and default:
            name = part
        if part != (partition or name) and not (partition is None and default):
            continue
        gpus = sum(int(m) for m in _GPUS.findall(gres))
        digits = re.match(r"\d+", mem)
        nodes[node] = Node(node, int(cpus or 0), int(digits.group()) if digits else 0, gpus)
    return name, list(nodes.values())


def never_fits(needs: list[dict[str, int]], partition: str, nodes: list[Node]) -> str | None:
    """Why the job can never start on ``partition`` (None: it can)."""
    if not nodes:
        return f"the partition {partition} has no nodes"
    if len(needs) > len(nodes):
        return (
            f"it needs {len(needs)} nodes (one per replica) and the partition {partition} has"
            f" {len(nodes)}"
        )
    for what, unit in (("cpus", "CPUs"), ("mem_mb", "MB of memory"), ("gpus", "GPUs")):
        most = max(n.__dict__[what] for n in nodes)
        want = max(need.get(what, 0) for need in needs)
        if what == "mem_mb" and most == 0:
            continue  # a partition that tracks no memory
        if want > most:
            return (
                f"a replica asks for {want} {unit} and the largest node of {partition} has {most}"
            )
    return None


__all__ = ["Node", "never_fits", "parse_sinfo", "replica_needs"]
