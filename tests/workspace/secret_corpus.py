"""A home folder's worth of credentials, as a hostile or unlucky workspace holds them: stores
nested in projects, stores no name list knew, keys under odd names, hard links. Each file carries
a unique LEAK marker, so a test can look for any of them in the bytes of an image layer."""

from __future__ import annotations

import os
from pathlib import Path

LEAK = "TXNB-LEAK"
PRIVATE_KEY = (
    "-----BEGIN OPENSSH PRIVATE KEY-----\n"
    "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW\n"
    "-----END OPENSSH PRIVATE KEY-----\n"
)
GHP = "ghp_" + "Ab1Cd2Ef3Gh4Ij5Kl6Mn7Op8Qr9St0Uv1Wx2Yz"
SA_KEY = (
    '{"type": "service_account", "project_id": "my-proj-1234", "private_key_id": "abc123",\n'
    ' "private_key": "-----BEGIN PRIVATE KEY-----\\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\\n'
    '-----END PRIVATE KEY-----\\n", "client_email": "x@my-proj-1234.iam.gserviceaccount.com"}\n'
)

# (path, content): hidden stores, wherever they are nested
HIDDEN = {
    ".git/config": f'[remote "origin"]\n\turl = https://bob:{GHP}@github.com/o/r.git\n',
    ".kube/config": "users:\n- name: ci\n  user:\n    token: eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJjaSJ9.c2lnbmF0dXJlMTIz\n",
    ".netrc": "machine example.test login bob password hunter2hunter2\n",
    ".pypirc": "[pypi]\nusername = __token__\npassword = pypi-AgEIcHlwaS5vcmcXXXX\n",
    ".npmrc": "//registry.example.test/:_authToken=npm_abcdefghijklmnopqrstuvwxyz0123456789\n",
    ".gnupg/private-keys-v1.d/AB12.key": "(private-key (rsa (n #00C0FFEE#)))\n",
    ".azure/msal_token_cache.json": '{"AccessToken": {"x": {"secret": "eyJ0eXAiOiJKV1Qi"}}}\n',
    ".config/git/credentials": f"https://bob:{GHP}@github.com\n",
    ".cargo/credentials.toml": '[registry]\ntoken = "cio1A2b3C4d5E6f7G8h9I0j"\n',
    ".config/containers/auth.json": '{"auths": {"quay.io": {"auth": "Ym9iOmh1bnRlcjI="}}}\n',
    ".m2/settings.xml": "<settings><servers><server><password>hunter2x9</password>"
    "</server></servers></settings>\n",
    ".gradle/gradle.properties": "mavenPassword=hunter2hunter2\n",
    ".config/pip/pip.conf": "[global]\nindex-url = https://bob:tok3n9x@pypi.example.test/simple\n",
    ".condarc": "channels:\n  - https://bob:tok3n9x@conda.example.test/t/abc/\n",
    ".mozilla/firefox/ab12.default/logins.json": '{"logins": [{"encryptedPassword": "MDoEEPg"}]}',
    ".streamlit/secrets.toml": 'db_password = "s3cr3tP4ssw0rd9"\n',
    ".envrc": "export DB_PASS=hunter2hunter2\n",
    ".jupyter/jupyter_server_config.py": "c.ServerApp.token = 'a1b2c3d4e5f6a7b8c9d0e1f2'\n",
    ".local/share/fish/fish_history": "- cmd: export HF_TOKEN=hf_x\n",
    ".ipython/profile_default/history.sqlite-journal": "SQLite journal\n",
    ".ssh/id_rsa": PRIVATE_KEY,
    ".bash_history": "mysql -p hunter2\n",
}
# stores no name list covers (outside hidden folders): only their content gives them away
VISIBLE = {
    "pip.conf": "[global]\nindex-url = https://__token__:pypi9Token4x@pypi.example.test/simple\n",
    "logins.json": '{"logins": [{"hostname": "https://x", "encryptedPassword": "MDoEEPgAAA9"}]}\n',
    "secrets.yaml": "db:\n  password: s3cr3tP4ssw0rd9\n",
    "terraform.tfstate": '{"resources": [{"attributes": {"password": "Sup3rS3cret9"}}]}\n',
    "my-proj-1234-abcdef012345.json": SA_KEY,
    "deploy_key": PRIVATE_KEY,
    "jupyter_server_config.py": "c.ServerApp.token = 'a1b2c3d4e5f6a7b8c9d0e1f2'\n",
    "server_settings.py": "c.ServerApp.token = 'f0e1d2c3b4a5968778695a4b'\n",
    "registry.json": '{"auths": {"ghcr.io": {"auth": "Ym9iOmh1bnRlcjJodW50ZXI="}}}\n',
    "ci.env": f"GITHUB_TOKEN={GHP}\n",
    "storage.cfg": "DefaultEndpointsProtocol=https;AccountName=acct;AccountKey="
    + "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
    + ";EndpointSuffix=core.windows.net\n",
    "stripe.txt": "key = sk_live_4eC39HqLyjWDarjtT1zdp7dc\n",
    "maven-settings.xml": "<settings><password>hunter2x9abc</password></settings>\n",
}
# ordinary files that must ship, with words that look like secrets and are not
KEEP = {
    "train.py": (
        "import os\npassword = os.environ['DB_PASSWORD']\napi_key = args.api_key\n"
        "token = resp.json()['token']\nfor key, value in cfg.items():\n    print(key)\n"
    ),
    "data/x.csv": "id,value\n1,2\n",
    "README.md": "Set your API key in the environment; never commit a password.\n",
    "conf.yaml": "password: ${DB_PASSWORD}\ntoken: <your token here>\n",
}
DEPTHS = ("", "proj/", "a/b/c/")


def plant(root: Path) -> dict[str, str]:
    """Write the corpus under ``root`` at every depth; returns every planted path → kind of
    file ("hidden", "visible", "keep", "hardlink", "symlink")."""
    planted: dict[str, str] = {}
    n = 0
    for depth in DEPTHS:
        for group, files in (("hidden", HIDDEN), ("visible", VISIBLE), ("keep", KEEP)):
            for rel, text in files.items():
                path = root / depth / rel
                path.parent.mkdir(parents=True, exist_ok=True)
                if group == "keep":
                    path.write_text(text)
                else:
                    n += 1
                    path.write_text(f"{text}# {LEAK}-{n}\n")
                planted[depth + rel] = group
        # a hard link to the SSH key under an innocent name, and a symlink to it
        link = root / depth / "notes" / "backup.txt"
        link.parent.mkdir(parents=True, exist_ok=True)
        os.link(root / depth / ".ssh/id_rsa", link)
        planted[f"{depth}notes/backup.txt"] = "hardlink"
        (root / depth / "key-link").symlink_to(".ssh/id_rsa")
        planted[f"{depth}key-link"] = "symlink"
    return planted


def shipped_expected() -> set[str]:
    """What may ship: the ordinary files, and the symlinks (as links, never their target)."""
    return {d + rel for d in DEPTHS for rel in KEEP} | {f"{d}key-link" for d in DEPTHS}
