"""Statements and objects for relay_wire.direct, built once per table or mapped class from
SQLAlchemy's own metadata: a table's multi-row INSERT with its columns' bind processors
(``Row``, ``bind``), and rows read on a driver connection turned into the detached objects a
Session would have loaded (``Loader``), with the columns' result processors."""

from __future__ import annotations

from collections.abc import Sequence
from operator import itemgetter
from typing import Any

from sqlalchemy import Column, Table
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import make_transient_to_detached
from sqlalchemy.orm.attributes import instance_state


class Row:
    """One table's INSERT: the column list, its placeholders and the columns' bind
    processors, built once."""

    def __init__(self, table: Table, dialect: Dialect, columns: Sequence[str] | None = None):
        chosen: list[Column[Any]] = [
            table.c[name] for name in (columns or [c.key for c in table.columns])
        ]
        quote = dialect.identifier_preparer.quote
        self.keys = [column.key for column in chosen]
        self.processors = [
            column.type.dialect_impl(dialect).bind_processor(dialect) for column in chosen
        ]
        # Identifiers from our own metadata, quoted; every value goes as a parameter.
        names = ", ".join(quote(c.name) for c in chosen)
        self.head = f"INSERT INTO {quote(table.name)} ({names}) VALUES "  # noqa: S608
        self.placeholders = "(" + ", ".join(["%s"] * len(chosen)) + ")"
        # A row with every key (relay_api's new_row makes them so) is read in one C call;
        # only the few columns with a bind processor (JSON) are then worked on: 100 rows of
        # the transactions table (38 columns, 2 processed) 0.30 -> 0.16 ms here.
        self._every = itemgetter(*self.keys) if len(self.keys) > 1 else None
        self._processed = [
            (index, process) for index, process in enumerate(self.processors) if process
        ]

    def values(self, row: dict[str, Any]) -> list[Any]:
        if self._every is not None and len(row) >= len(self.keys):
            try:
                out = list(self._every(row))
            except KeyError:  # more keys, but not these: a column left to its default
                out = [row.get(key) for key in self.keys]
        else:
            out = [row.get(key) for key in self.keys]
        for index, process in self._processed:
            out[index] = process(out[index])
        return out

    def insert(
        self, rows: Sequence[dict[str, Any]], *, ignore: bool = False
    ) -> tuple[str, list[Any]]:
        """The multi-row INSERT of ``rows`` and its arguments; ``ignore``: INSERT IGNORE (a
        row whose key is taken is skipped, not an error)."""
        args: list[Any] = []
        for row in rows:
            args.extend(self.values(row))
        head = self.head.replace("INSERT", "INSERT IGNORE", 1) if ignore else self.head
        return head + ", ".join([self.placeholders] * len(rows)), args


def bind(table: Table, dialect: Dialect, column: str, value: Any) -> Any:
    """``value`` as ``table.column``'s bind processor sends it."""
    process = table.c[column].type.dialect_impl(dialect).bind_processor(dialect)
    return process(value) if process is not None else value


class Loader:
    """Rows of one mapped class read on a driver connection, turned into the objects a
    Session would have loaded and expunged (detached, no pending changes), with the columns'
    own result processors (JSON through orjson)."""

    def __init__(self, cls: type[Any], dialect: Dialect) -> None:
        mapper = cls.__mapper__
        table: Table = cls.__table__
        quote = dialect.identifier_preparer.quote
        self.cls = cls
        self._mapper = mapper
        self._new = mapper.class_manager.new_instance
        self.keys = [mapper.get_property_by_column(column).key for column in table.columns]
        self.processors = [
            column.type.dialect_impl(dialect).result_processor(dialect, None)
            for column in table.columns
        ]
        self._processed = [
            (key, process)
            for key, process in zip(self.keys, self.processors, strict=True)
            if process is not None
        ]
        self._primary = [mapper.get_property_by_column(c).key for c in mapper.primary_key]
        # Every attribute is a column read here: nothing is left to expire, so an object
        # needs only its identity to be what make_transient_to_detached makes of it.
        self._columns_only = set(mapper.attrs.keys()) == set(self.keys)
        names = ", ".join(quote(column.name) for column in table.columns)
        self.select = f"SELECT {names} FROM {quote(table.name)}"  # noqa: S608 (our metadata)

    def objects(self, rows: Sequence[tuple[Any, ...]]) -> list[Any]:
        out = []
        keys, primary = self.keys, self._primary
        for row in rows:
            values = dict(zip(keys, row, strict=True))
            for key, process in self._processed:
                values[key] = process(values[key])
            # As the ORM's own loading does: the instance made without __init__ and its state
            # dict filled (no attribute events), then given its identity, history clear
            # (~6 µs a row here, ~12 through make_transient_to_detached, ~33 through the
            # constructor).
            obj = self._new()
            obj.__dict__.update(values)
            if self._columns_only:  # a new instance's history is already clear
                identity = [values[key] for key in primary]
                instance_state(obj).key = self._mapper.identity_key_from_primary_key(identity)
            else:
                make_transient_to_detached(obj)
            out.append(obj)
        return out
