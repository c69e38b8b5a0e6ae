"""The durable record of every accepted submission (SQLite, WAL)."""
