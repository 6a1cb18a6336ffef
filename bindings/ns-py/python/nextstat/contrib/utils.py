"""Drop-in for ``pyhf.contrib.utils``: ``download``, a likelihood archive (a HEPData record of
background-only workspaces and patchsets) fetched and unpacked into a folder.

Stricter than pyhf where pyhf can lose or misplace files: an archive member whose path leaves
the folder (``../``, an absolute path, a link out of it) is refused before anything is written,
and an existing folder or file is never replaced (pyhf's zip branch deletes the folder first)."""

from __future__ import annotations

import io
import os
import tarfile
import urllib.error
import urllib.request
import zipfile
from pathlib import Path, PurePosixPath
from urllib.parse import urlsplit

from ..exceptions import InvalidArchive, InvalidArchiveHost

__all__ = ["download"]

_APPROVED_HOSTS = ("www.hepdata.net", "doi.org")

#: The largest archive read into memory (published likelihood archives are tens of MB).
_MAX_BYTES = 2 << 30


def _fetch(archive_url: str) -> bytes:
    request = urllib.request.Request(archive_url, headers={"Accept": "application/x-tar, application/zip"})
    try:
        with urllib.request.urlopen(request) as response:  # noqa: S310 (the host was checked)
            content = response.read(_MAX_BYTES + 1)
    except urllib.error.HTTPError as e:
        raise InvalidArchive(
            f"{archive_url} gives a response code of {e.code}: either the archive host has a "
            f"temporary problem or {archive_url} is not a valid URL"
        ) from None
    except (urllib.error.URLError, OSError) as e:
        raise InvalidArchive(f"{archive_url} could not be fetched: {getattr(e, 'reason', e)}") from None
    if len(content) > _MAX_BYTES:
        raise InvalidArchive(f"{archive_url} is larger than {_MAX_BYTES >> 30} GiB")
    return content


def _inside(name: str, where: str) -> PurePosixPath:
    """``name`` as a relative path that stays inside the folder, or an error naming it."""
    path = PurePosixPath(name.replace("\\", "/"))
    if path.is_absolute() or ".." in path.parts or (path.parts and ":" in path.parts[0]):
        raise InvalidArchive(f"{where}: member {name!r} would be written outside the output folder")
    return path


def _unpack_tar(content: bytes, folder: Path, where: str) -> None:
    with tarfile.open(mode="r:*", fileobj=io.BytesIO(content)) as archive:
        members = archive.getmembers()
        for member in members:
            _inside(member.name, where)
            if member.issym() or member.islnk():
                target = PurePosixPath(member.name).parent / member.linkname if member.issym() else PurePosixPath(member.linkname)
                _inside(str(target), f"{where} (the link {member.name!r})")
            elif not (member.isfile() or member.isdir()):
                raise InvalidArchive(f"{where}: member {member.name!r} is not a file or folder")
        folder.mkdir(parents=True)
        for member in members:
            archive.extract(member, folder, set_attrs=False, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))


def _unpack_zip(content: bytes, folder: Path, where: str) -> None:
    with zipfile.ZipFile(io.BytesIO(content)) as archive:
        names = archive.namelist()
        for name in names:
            _inside(name, where)
        # A zip of one top folder unpacks as that folder's content, as pyhf does.
        tops = {PurePosixPath(n).parts[0] for n in names if PurePosixPath(n).parts}
        strip = len(tops) == 1 and all(len(PurePosixPath(n).parts) > 1 or n.endswith("/") for n in names)
        folder.mkdir(parents=True)
        for info in archive.infolist():
            parts = PurePosixPath(info.filename).parts[1 if strip else 0:]
            if not parts:
                continue
            target = folder.joinpath(*parts)
            if info.is_dir():
                target.mkdir(parents=True, exist_ok=True)
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            try:
                with archive.open(info) as source, open(target, "xb") as sink:
                    sink.write(source.read())
            except FileExistsError:
                raise InvalidArchive(f"{where}: member {info.filename!r} is in the archive twice") from None


def download(archive_url: str, output_directory: str, force: bool = False, compress: bool = False) -> None:
    """Fetch the archive at ``archive_url`` and unpack it (tar of any compression, or zip) into
    the folder ``output_directory``, or with ``compress=True`` keep it as the file
    ``output_directory``. Hosts other than HEPData's (``www.hepdata.net``, ``doi.org``) need
    ``force=True``. The folder or file must not exist yet.

    Raises :class:`~nextstat.exceptions.InvalidArchiveHost` for an unapproved host and
    :class:`~nextstat.exceptions.InvalidArchive` for an error answer, content that is neither a
    tar nor a zip archive, or a member that would land outside the folder."""
    host = urlsplit(archive_url).netloc
    if not force and host not in _APPROVED_HOSTS:
        raise InvalidArchiveHost(
            f"{host} is not an approved archive host ({', '.join(_APPROVED_HOSTS)}): pass force=True "
            "to download from it"
        )
    output = Path(os.fspath(output_directory))
    if output.exists():
        raise InvalidArchive(f"{output} already exists: download writes a new folder (or file, with compress=True)")
    content = _fetch(archive_url)
    if compress:
        with open(output, "xb") as sink:
            sink.write(content)
        return
    try:
        _unpack_tar(content, output, archive_url)
    except tarfile.ReadError:
        if not zipfile.is_zipfile(io.BytesIO(content)):
            raise InvalidArchive(f"the content of {archive_url} is neither a tar nor a zip archive") from None
        _unpack_zip(content, output, archive_url)
