"""The prediction of Pebble's serial-encoding bug (tests/pebble_quirks.py)."""

from __future__ import annotations

from pebble_quirks import pebble_refuses_replaces_of


def test_a_serial_whose_der_needs_a_leading_zero_is_the_one_pebble_cannot_find() -> None:
    assert pebble_refuses_replaces_of("80")
    assert pebble_refuses_replaces_of("f1020304050607")  # 7 bytes, high bit set
    assert not pebble_refuses_replaces_of("7f")
    assert not pebble_refuses_replaces_of("0102030405060708")  # 8 bytes below 2**63
    assert pebble_refuses_replaces_of("00f1")  # leading zeros do not count: 0xf1
