from pathlib import Path

from fastrack_core.schema import COLUMNS, METADATA_FIELDS, DepKind, OpKind

DOC = (Path(__file__).resolve().parent.parent / "docs" / "trace-schema.md").read_text()


def test_every_column_kind_and_metadata_key_is_documented():
    for name in COLUMNS:
        assert f"| `{name}` |" in DOC, name
    for key in METADATA_FIELDS:
        assert f"| `{key}` |" in DOC, key
    for k in OpKind:
        assert f"| `{k.label}` |" in DOC, k
    for k in DepKind:
        assert f"`{k.label}`" in DOC, k
