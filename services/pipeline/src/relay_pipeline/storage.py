"""Files through Hadoop's FileSystem API, so the same code writes to a local directory, HDFS or
S3 (``s3a://``) — whatever Spark itself writes Parquet to.

Renames are atomic on local disks and HDFS. On object stores a rename is a copy then a delete;
callers that need atomicity (the archive's publish step) only rename whole files and can tell a
finished rename from an unfinished one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pyspark.sql import SparkSession


@dataclass(frozen=True)
class Storage:
    spark: SparkSession

    @property
    def _jvm(self) -> Any:
        return self.spark.sparkContext._jvm

    def _path(self, path: str) -> Any:
        return self._jvm.org.apache.hadoop.fs.Path(path)

    def _fs(self, path: str) -> Any:
        conf = self.spark.sparkContext._jsc.hadoopConfiguration()
        return self._path(path).getFileSystem(conf)

    def qualify(self, path: str) -> str:
        """Absolute, scheme-qualified form (``file:/…``, ``s3a://…``)."""
        p = self._path(path)
        return str(self._fs(path).makeQualified(p).toString())

    def exists(self, path: str) -> bool:
        return bool(self._fs(path).exists(self._path(path)))

    def mkdirs(self, path: str) -> None:
        self._fs(path).mkdirs(self._path(path))

    def children(self, path: str) -> list[tuple[str, bool]]:
        """Direct children as (name, is_directory); empty when ``path`` does not exist."""
        if not self.exists(path):
            return []
        return sorted(
            (str(status.getPath().getName()), bool(status.isDirectory()))
            for status in self._fs(path).listStatus(self._path(path))
        )

    def files(self, path: str) -> list[str]:
        """Every file below ``path``, as paths relative to it."""
        out: list[str] = []
        if not self.exists(path):
            return out
        iterator = self._fs(path).listFiles(self._path(path), True)
        root = self.qualify(path).rstrip("/") + "/"
        while iterator.hasNext():
            full = str(iterator.next().getPath().toString())
            out.append(full[len(root) :] if full.startswith(root) else full)
        return sorted(out)

    def file_statuses(self, path: str) -> list[tuple[str, int, int]]:
        """Every file below ``path`` as (path relative to it, length, modification time in ms):
        what a cache keyed by its inputs compares."""
        out: list[tuple[str, int, int]] = []
        if not self.exists(path):
            return out
        iterator = self._fs(path).listFiles(self._path(path), True)
        root = self.qualify(path).rstrip("/") + "/"
        while iterator.hasNext():
            status = iterator.next()
            full = str(status.getPath().toString())
            relative = full[len(root) :] if full.startswith(root) else full
            out.append((relative, int(status.getLen()), int(status.getModificationTime())))
        return sorted(out)

    def rename(self, source: str, target: str) -> bool:
        fs = self._fs(target)
        fs.mkdirs(self._path(target).getParent())
        return bool(fs.rename(self._path(source), self._path(target)))

    def delete(self, path: str, *, recursive: bool = True) -> None:
        self._fs(path).delete(self._path(path), recursive)

    def write_text(self, path: str, text: str) -> None:
        """Write a small file whole: to ``path.tmp``, then rename over ``path``."""
        tmp = f"{path}.tmp"
        stream = self._fs(tmp).create(self._path(tmp), True)
        try:
            stream.write(bytearray(text.encode("utf-8")))
        finally:
            stream.close()
        fs = self._fs(path)
        if fs.exists(self._path(path)):
            fs.delete(self._path(path), False)
        fs.rename(self._path(tmp), self._path(path))

    def read_text(self, path: str) -> str:
        fs = self._fs(path)
        stream = fs.open(self._path(path))
        try:
            length = int(fs.getFileStatus(self._path(path)).getLen())
            buffer = self._jvm.java.io.ByteArrayOutputStream()
            self._jvm.org.apache.hadoop.io.IOUtils.copyBytes(stream, buffer, max(length, 1), False)
            return bytes(buffer.toByteArray()).decode("utf-8")
        finally:
            stream.close()
