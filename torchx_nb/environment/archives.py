"""What a wheel or source distribution file says of itself, read before it is installed or
built: that it is whole (a download cut short, a file copied halfway), and the name its own
metadata gives, which pip holds to the name its file name and requirement say."""

from __future__ import annotations

import tarfile
import zipfile
from email.parser import HeaderParser
from pathlib import Path


def metadata_name(path: Path) -> str:
    """The ``Name`` of a wheel's ``*.dist-info/METADATA`` or an sdist's ``PKG-INFO``; raises
    ``ValueError`` naming what is wrong when the file is not a whole archive or has none."""
    return name_and_version(path)[0]


def name_and_version(path: Path) -> tuple[str, str | None]:
    """The ``Name`` and ``Version`` (None when it gives none) of a wheel's
    ``*.dist-info/METADATA`` or an sdist's ``PKG-INFO``; raises ``ValueError`` as
    ``metadata_name`` does."""
    try:
        if path.suffix == ".whl" or path.suffix == ".zip":
            return _zip_name(path)
        return _tar_name(path)
    except (OSError, EOFError, zipfile.BadZipFile, tarfile.TarError) as e:
        raise ValueError(f"{type(e).__name__}: {e}") from None


def _header_name(text: str) -> tuple[str, str | None]:
    headers = HeaderParser().parsestr(text.split("\n\n", 1)[0])
    name, version = headers.get("Name"), headers.get("Version")
    if not name:
        raise ValueError("its metadata has no Name")
    return str(name).strip(), str(version).strip() if version else None


def _zip_name(path: Path) -> tuple[str, str | None]:
    with zipfile.ZipFile(path) as zf:  # a cut file has no central directory at its end
        want = "METADATA" if path.suffix == ".whl" else "PKG-INFO"
        found = [
            n
            for n in zf.namelist()
            if n.count("/") == 1
            and n.endswith(f"/{want}")
            and (want != "METADATA" or n.split("/")[0].endswith(".dist-info"))
        ]
        if not found:
            raise ValueError(f"it holds no {want}")
        with zf.open(sorted(found)[0]) as f:  # its first MB: the headers are at its top
            return _header_name(f.read(1 << 20).decode("utf-8", "replace"))


def _tar_name(path: Path) -> tuple[str, str | None]:
    name: tuple[str, str | None] | None = None
    with tarfile.open(path) as tf:
        # every member is read through, so a cut gzip stream is found (its end is checked)
        for member in tf:
            top = member.isfile() and member.name.count("/") == 1
            if name is None and top and member.name.endswith("/PKG-INFO"):
                f = tf.extractfile(member)
                if f is not None:
                    name = _header_name(f.read(1 << 20).decode("utf-8", "replace"))
    if name is None:
        raise ValueError("it holds no PKG-INFO")
    return name
