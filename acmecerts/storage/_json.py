"""The JSON documents kept in a store: one object each, compact, keys sorted."""

from __future__ import annotations

import json
from typing import Any

from acmecerts.errors import StorageError

__all__ = ["decode_json", "encode_json"]


def encode_json(value: dict[str, Any]) -> bytes:
    """``value`` as stored: compact JSON, keys sorted (the same bytes for the same value)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode("utf-8")


def decode_json(data: bytes, key: str) -> dict[str, Any]:
    """The JSON object stored at ``key``; :class:`StorageError` naming ``key`` if it is not one."""
    try:
        value = json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise StorageError(f"{key} is not valid JSON: {exc}", path=key) from exc
    if not isinstance(value, dict):
        raise StorageError(f"{key} is not a JSON object", path=key)
    return value
