"""Natural order for certificate names: :func:`acmecerts.manager.natural_key`."""

from acmecerts.manager import natural_key

__all__ = ["natural_key"]
