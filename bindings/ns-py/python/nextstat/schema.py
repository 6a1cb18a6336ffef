"""Drop-in for ``pyhf.schema``: ``validate(spec, schema_name)`` by nextstat's own readers of
each document (the workspace, model and patchset checks every call makes), and the schema
``version``. The JSON schema files themselves are pyhf's and are not shipped."""

from __future__ import annotations

from typing import Any, Optional

__all__ = ["validate", "version"]

#: The version of the pyhf JSON documents nextstat reads.
version = "1.0.0"


def validate(spec: Any, schema_name: str, *, version: Optional[str] = None, allow_tensors: bool = True) -> None:
    """Check ``spec`` as the document ``schema_name`` names (``workspace.json``, ``model.json``,
    ``patchset.json``, or ``jsonpatch.json`` for a list of patch operations); raise
    ``exceptions.InvalidSpecification`` (naming what is wrong and where) if it is not one."""
    from . import Model, PatchSet, Workspace
    from .exceptions import InvalidSpecification

    if version not in (None, globals()["version"]):
        raise InvalidSpecification(f"schema version {version!r}: nextstat reads version {globals()['version']} documents")
    readers = {
        "workspace.json": Workspace,
        "model.json": lambda s: Model(s),
        "patchset.json": PatchSet,
        "jsonpatch.json": _patch_operations,
    }
    reader = readers.get(schema_name)
    if reader is None:
        raise InvalidSpecification(f"unknown schema {schema_name!r}: one of {', '.join(readers)}")
    try:
        reader(spec)
    except InvalidSpecification:
        raise
    except (ValueError, TypeError, KeyError) as e:
        raise InvalidSpecification(f"{schema_name}: {e}") from None


def _patch_operations(spec: Any) -> None:
    import json

    if not isinstance(spec, list) or not all(isinstance(op, dict) and "op" in op and "path" in op for op in spec):
        raise ValueError("a JSON patch is a list of operations, each with 'op' and 'path'")
    json.dumps(spec, allow_nan=False)
