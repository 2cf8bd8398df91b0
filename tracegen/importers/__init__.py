"""Trace importers: each turns one foreign format into a schema-v1 table."""
