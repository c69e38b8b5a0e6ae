"""The derived store beside the archive: data computed once from closed archive partitions and
kept per accept date, so a report reads it instead of computing it again.

Layout (``PATH`` is the archive root, ``NAME`` what is derived, e.g. ``lifecycles``)::

    PATH/_derived/NAME/date=YYYY-MM-DD/<build>-part-….parquet   one date's derived rows
    PATH/_derived/NAME/date=YYYY-MM-DD/_manifest.json           its key and the files it covers
    PATH/_derived/NAME/_staging/<build>/date=…/                 only while a build runs

A date's manifest is written last, once its files are in place. It holds the key the data was
derived under — the version of the deriving code and the archive files of that date (path,
length, modification time) it was derived from — and names its files. A date is used only when
its manifest's key equals the key computed now and every file it names is present; anything
else (no manifest, another key, a missing file) is rebuilt, never read. Files of an earlier
build leave once the new manifest is in place.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from relay_pipeline.storage import Storage

DERIVED = "_derived"
MANIFEST = "_manifest.json"
PARTITION = "date"

# Per table, the archive files of one date: [relative name, length, modification time (ms)].
Inputs = dict[str, list[list[Any]]]


def archive_inputs(storage: Storage, root: str, tables: tuple[str, ...]) -> dict[str, Inputs]:
    """Per accept date, the files of each archive table that Spark would read for it (one
    listing per table; names starting with ``_`` or ``.`` are not data)."""
    by_date: dict[str, Inputs] = {}
    for table in tables:
        for relative, length, modified in storage.file_statuses(f"{root.rstrip('/')}/{table}"):
            directory, _, name = relative.rpartition("/")
            if "/" in directory or not directory.startswith(f"{PARTITION}="):
                continue
            if name.startswith(("_", ".")):
                continue
            date = directory.split("=", 1)[1]
            inputs = by_date.setdefault(date, {t: [] for t in tables})
            inputs[table].append([name, length, modified])
    return by_date


@dataclass(frozen=True)
class Manifest:
    """What one date's derived data is, and what it was derived from."""

    date: str
    key: dict[str, Any]
    files: list[str]
    build: str
    facts: dict[str, Any]

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


class DerivedStore:
    def __init__(self, storage: Storage, archive_root: str, name: str) -> None:
        self.storage = storage
        self.archive_root = storage.qualify(archive_root).rstrip("/")
        self.base = f"{self.archive_root}/{DERIVED}/{name}"

    def date_dir(self, date: str) -> str:
        return f"{self.base}/{PARTITION}={date}"

    def staging(self, build: str) -> str:
        return f"{self.base}/_staging/{build}"

    def _manifest_path(self, date: str) -> str:
        return f"{self.date_dir(date)}/{MANIFEST}"

    def read(self, date: str) -> Manifest | None:
        path = self._manifest_path(date)
        if not self.storage.exists(path):
            return None
        try:
            raw = json.loads(self.storage.read_text(path))
            return Manifest(
                date=raw["date"],
                key=raw["key"],
                files=list(raw["files"]),
                build=raw["build"],
                facts=dict(raw["facts"]),
            )
        except (ValueError, KeyError, TypeError):  # half-written or foreign: not a manifest
            return None

    def present(self) -> dict[str, set[str]]:
        """The files each date's directory holds now (one listing of the store)."""
        found: dict[str, set[str]] = {}
        for relative, _, _ in self.storage.file_statuses(self.base):
            directory, _, name = relative.rpartition("/")
            if directory.startswith(f"{PARTITION}=") and "/" not in directory:
                found.setdefault(directory.split("=", 1)[1], set()).add(name)
        return found

    def valid(self, date: str, key: dict[str, Any], present: set[str]) -> Manifest | None:
        """The date's manifest if it was derived under ``key`` and all the files it names are
        among ``present`` (the date's files, from ``present()``)."""
        if MANIFEST not in present:
            return None
        manifest = self.read(date)
        if manifest is None or manifest.date != date or manifest.key != key:
            return None
        return manifest if set(manifest.files) <= present else None

    def paths(self, manifest: Manifest) -> list[str]:
        return [f"{self.date_dir(manifest.date)}/{name}" for name in manifest.files]

    def publish(
        self, build: str, date: str, key: dict[str, Any], facts: dict[str, Any]
    ) -> Manifest:
        """Move a build's files of ``date`` into place, then write the manifest naming them,
        then remove whatever an earlier build left there."""
        staged = f"{self.staging(build)}/{PARTITION}={date}"
        files = []
        for name, is_dir in self.storage.children(staged):
            if is_dir or name.startswith(("_", ".")):
                continue
            target = f"{build}-{name}"
            if not self.storage.rename(f"{staged}/{name}", f"{self.date_dir(date)}/{target}"):
                raise OSError(f"could not move {staged}/{name} into {self.date_dir(date)}")
            files.append(target)
        manifest = Manifest(date=date, key=key, files=sorted(files), build=build, facts=facts)
        self.storage.write_text(self._manifest_path(date), json.dumps(manifest.as_dict()))
        # Another build of the same date may have published since: keep what the manifest on
        # disk names now, whichever build it is.
        current = self.read(date)
        keep = set(current.files if current is not None else manifest.files)
        for name, is_dir in self.storage.children(self.date_dir(date)):
            if not is_dir and name not in keep and not name.startswith(("_", ".")):
                self.storage.delete(f"{self.date_dir(date)}/{name}", recursive=False)
        return manifest

    def discard(self, build: str) -> None:
        self.storage.delete(self.staging(build))
