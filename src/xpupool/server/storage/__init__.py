"""Durable state: SQLAlchemy tables split by group, one writer (the server process)."""
