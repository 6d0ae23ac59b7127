"""The lease heartbeat: it renews what is held, notes what another worker took, survives a
failed renewal, and beats on its own while its holder works."""

from __future__ import annotations

import threading
from collections.abc import Mapping

from app.reconcilers.leases import HeldLeases, Ref

ONE: Ref = ("clusters", "1")
TWO: Ref = ("clusters", "2")


class Table:
    """Lease rows: key -> token; a renewal keeps those still held under their token."""

    def __init__(self) -> None:
        self.rows: dict[Ref, str] = {}
        self.renewals: list[dict[Ref, str]] = []
        self.failing = False
        self.beat = threading.Event()

    def renew(self, held: Mapping[Ref, str]) -> set[Ref]:
        self.renewals.append(dict(held))
        self.beat.set()
        if self.failing:
            raise ConnectionError("the database went away")
        return {key for key, token in held.items() if self.rows.get(key) == token}


def test_a_beat_renews_what_is_held_and_notes_what_was_taken() -> None:
    table = Table()
    leases = HeldLeases(table.renew, 10.0)
    table.rows = {ONE: "a/1", TWO: "a/1"}
    leases.add(ONE, "a/1")
    leases.add(TWO, "a/1")
    table.rows[TWO] = "b/7"  # another worker claimed it after the lease ran out
    leases.renew_now()
    assert table.renewals == [{ONE: "a/1", TWO: "a/1"}]
    assert (leases.lost(ONE), leases.lost(TWO)) == (False, True)
    leases.renew_now()
    assert table.renewals[-1] == {ONE: "a/1"}  # a lost lease is not renewed again


def test_a_released_lease_is_no_longer_renewed() -> None:
    table = Table()
    leases = HeldLeases(table.renew, 10.0)
    leases.add(ONE, "a/1")
    leases.release(ONE)
    leases.renew_now()
    assert table.renewals == [] and not leases.lost(ONE)


def test_a_failed_renewal_loses_nothing() -> None:
    table = Table()
    table.rows = {ONE: "a/1"}
    leases = HeldLeases(table.renew, 10.0)
    leases.add(ONE, "a/1")
    table.failing = True
    leases.renew_now()
    assert not leases.lost(ONE)  # the fenced writes decide if the lease ran out meanwhile
    table.failing = False
    leases.renew_now()
    assert table.renewals == [{ONE: "a/1"}, {ONE: "a/1"}] and not leases.lost(ONE)


def test_the_heartbeat_beats_while_the_holder_works_and_stops_after() -> None:
    table = Table()
    table.rows = {ONE: "a/1"}
    with HeldLeases(table.renew, 0.01) as leases:
        leases.add(ONE, "a/1")
        assert table.beat.wait(30), "the heartbeat never renewed"
    beats = len(table.renewals)
    table.beat.clear()
    assert not table.beat.wait(0.1)
    assert len(table.renewals) == beats
