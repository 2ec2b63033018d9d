"""What Pebble gets wrong, predicted, so a test can expect it instead of failing on it.

Pebble (2.10, and upstream HEAD) files an issued certificate under the hex of its serial
as a ``big.Int``'s minimal bytes (``hex(serial.Bytes())``), but reads the serial of an
ARI certID (RFC 9773, the ``replaces`` of a ``newOrder``) as the hex of the DER
integer's content bytes the client sent. The two differ when the serial's top byte has
its high bit set: DER then puts a 0x00 before it (Pebble's serials are random below
2**63, so this is a serial under 2**56 with its first byte >= 0x80, about 1 in 256).
For such a certificate Pebble answers every ``replaces`` with 500 "could not find an
order for the given certificate", and the client falls back to an order without it,
as it must: one more ``newOrder`` than a test of a renewal would count.
"""

from __future__ import annotations

#: The start of the ``detail`` of Pebble's 500 answer to such a ``replaces``.
REFUSAL_DETAIL = "could not find an order for the given certificate"


def pebble_refuses_replaces_of(serial_hex: str) -> bool:
    """Whether Pebble answers a ``replaces`` naming the certificate with this serial
    (lower-case hex, as :attr:`IssuedCertificate.serial`) with its 500."""
    value = int(serial_hex, 16)
    minimal = value.to_bytes(max(1, (value.bit_length() + 7) // 8), "big")
    return minimal[0] >= 0x80
