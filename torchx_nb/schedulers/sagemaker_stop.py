"""Who stopped a SageMaker training job: StopTrainingJob keeps no reason, so torchx_nb's
cancel tags the job with who asked before it stops it; a Stopped job without that tag was
stopped outside torchx_nb (the console, the AWS CLI, an API call)."""

from __future__ import annotations

import re
from typing import Any

from torchx_nb.schedulers.cancellers import cancelled_by, canceller, clean_who

TAG_STOPPED_BY = "torchx-nb/stopped-by"  # who asked torchx_nb to stop the job


def tag_value(text: str) -> str:
    """``text`` as a SageMaker tag value may hold it (letters, digits, spaces, ``_.:/=+-@``;
    at most 256 characters)."""
    return re.sub(r"[^\w .:/=+\-@]", "", text)[:256]


def tag_stop(client: Any, name: str) -> None:
    """Tag training job ``name`` with who is stopping it (before the stop)."""
    arn = client.describe_training_job(TrainingJobName=name)["TrainingJobArn"]
    client.add_tags(
        ResourceArn=arn, Tags=[{"Key": TAG_STOPPED_BY, "Value": tag_value(canceller())}]
    )


def stopped_by(client: Any, arn: str) -> str:
    """Who torchx_nb's stop of the job was for (its tag); '' when it has no such tag."""
    tags = client.list_tags(ResourceArn=arn).get("Tags", [])
    return clean_who(str({t["Key"]: t["Value"] for t in tags}.get(TAG_STOPPED_BY) or ""))


def stop_ending(by: str) -> str:
    """Who stopped a Stopped job: torchx_nb's cancel for ``by``, else a StopTrainingJob made
    outside torchx_nb."""
    if by:
        return cancelled_by(by, "stopped")
    return (
        "was stopped outside torchx_nb (StopTrainingJob: the console, the AWS CLI or an API call)"
    )


__all__ = ["TAG_STOPPED_BY", "stop_ending", "stopped_by", "tag_stop", "tag_value"]
