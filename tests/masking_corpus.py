"""Secret-looking text a job prints or fails with, and the parts of it that must never show on
any surface (CLI lines, dry runs, describe, status, widgets, the snapshot and its log tail,
reprs, the REST API, a saved notebook)."""

from __future__ import annotations

import json

PRIVATE_KEY = "-----BEGIN RSA PRIVATE KEY-----\nMIIEsecretkeybodyQ7x\n-----END RSA PRIVATE KEY-----"
STRIPE = "sk_live_" + "4eC39HqLyjWDarjtT1zdp7dc"
HF = "hf_" + "AbCdEfGhIjKlMnOpQrStUvWxYz012345"
# (a line as a job prints it, the part of it that must be masked)
CORPUS = [
    ("DB_PASS=hunter2-m1", "hunter2-m1"),
    ("MYSQL_PWD=hunter2-m2", "hunter2-m2"),
    ("PGPASS=hunter2-m3", "hunter2-m3"),
    (
        "DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=c2VjcmV0bTQ9PT0=;Endpoint=x",
        "c2VjcmV0bTQ9PT0=",
    ),
    (f"charging with {STRIPE}", STRIPE),
    ("cmd --password=hunter2-m6 --epochs 3", "hunter2-m6"),
    ("cmd --api-key=hunter2-m7", "hunter2-m7"),
    ("cmd --password hunter2-m8 --epochs 3", "hunter2-m8"),
    ("connecting to postgres://bob:p@ss-m9@db.internal:5432/x", "p@ss-m9"),
    (f"HF_TOKEN={HF}", HF),
    ("curl -H 'Authorization: Bearer m11abcdef0123456789'", "m11abcdef0123456789"),
    (PRIVATE_KEY, "MIIEsecretkeybodyQ7x"),
]
LINES = [line for line, _ in CORPUS]
SECRETS = [secret for _, secret in CORPUS]
# what a job's environment and arguments may hold (for dry runs and describe)
ENV = {"DB_PASS": "hunter2-m1", "MYSQL_PWD": "hunter2-m2", "PGPASS": "hunter2-m3", "HF_TOKEN": HF}
ARGS = ["--password", "hunter2-m8", "--api-key=hunter2-m7", "--epochs", "3"]


def failing_job_source() -> str:
    """Python for a job that prints the corpus and fails with it as its error message."""
    return (
        "import json, os, sys\n"
        f"lines = {json.dumps(LINES)}\n"
        "print('\\n'.join(lines), flush=True)\n"
        "with open(os.environ['TORCHELASTIC_ERROR_FILE'], 'w') as f:\n"
        "    json.dump({'message': {'message': ' | '.join(lines)}}, f)\n"
        "sys.exit(3)\n"
    )


def leaked(text: str) -> list[str]:
    """The corpus's secrets found in ``text``."""
    return [secret for secret in SECRETS if secret in text]
