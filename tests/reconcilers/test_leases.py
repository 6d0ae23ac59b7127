"""The lease heartbeat: it renews what is held, notes what another worker took, survives a
failed renewal, and beats on its own while its holder works."""

from __future__ import annotations

import threading
from collections.abc import Mapping

from app.reconcilers.leases import HeldLeases


class Table:
    """Lease rows: key -> token; a renewal keeps those still held under their token."""

    def __init__(self) -> None:
        self.rows: dict[int, str] = {}
        self.renewals: list[dict[int, str]] = []
        self.failing = False
        self.beat = threading.Event()

    def renew(self, held: Mapping[int, str]) -> set[int]:
        self.renewals.append(dict(held))
        self.beat.set()
        if self.failing:
            raise ConnectionError("the database went away")
        return {key for key, token in held.items() if self.rows.get(key) == token}


def test_a_beat_renews_what_is_held_and_notes_what_was_taken() -> None:
    table = Table()
    leases = HeldLeases(table.renew, 10.0)
    table.rows = {1: "a/1", 2: "a/1"}
    leases.add(1, "a/1")
    leases.add(2, "a/1")
    table.rows[2] = "b/7"  # another worker claimed it after the lease ran out
    leases.renew_now()
    assert table.renewals == [{1: "a/1", 2: "a/1"}]
    assert (leases.lost(1), leases.lost(2)) == (False, True)
    leases.renew_now()
    assert table.renewals[-1] == {1: "a/1"}  # a lost lease is not renewed again


def test_a_released_lease_is_no_longer_renewed() -> None:
    table = Table()
    leases = HeldLeases(table.renew, 10.0)
    leases.add(1, "a/1")
    leases.release(1)
    leases.renew_now()
    assert table.renewals == [] and not leases.lost(1)


def test_a_failed_renewal_loses_nothing() -> None:
    table = Table()
    table.rows = {1: "a/1"}
    leases = HeldLeases(table.renew, 10.0)
    leases.add(1, "a/1")
    table.failing = True
    leases.renew_now()
    assert not leases.lost(1)  # the fenced writes decide if the lease ran out meanwhile
    table.failing = False
    leases.renew_now()
    assert table.renewals == [{1: "a/1"}, {1: "a/1"}] and not leases.lost(1)


def test_the_heartbeat_beats_while_the_holder_works_and_stops_after() -> None:
    table = Table()
    table.rows = {1: "a/1"}
    with HeldLeases(table.renew, 0.01) as leases:
        leases.add(1, "a/1")
        assert table.beat.wait(30), "the heartbeat never renewed"
    beats = len(table.renewals)
    table.beat.clear()
    assert not table.beat.wait(0.1)
    assert len(table.renewals) == beats
