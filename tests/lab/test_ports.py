"""The ports the lab and the tests start their programs on: never one another process of the
machine was handed at the same time, never one something listens on, never one the kernel
could hand out by itself in the meantime."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.lab import ports
from tests.support.paths import ROOT

TAKEN = 40
CHILD = """
import json, sys
from app.lab import ports
low, _ = ports.candidate_range()
ports._cursor[:] = [low]
taken = [ports.free_port() for _ in range({count})]
print(json.dumps(taken), flush=True)
sys.stdin.read()  # holds its reservations until the test lets it go
"""


@pytest.fixture
def own_reservations(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """This process's allocator as a fresh process's, on reservations of this test's own."""
    folder = tmp_path / f"gpu-tenant-portal-ports-{os.getuid()}"
    monkeypatch.setattr(ports, "RESERVATIONS", folder)
    monkeypatch.setattr(ports, "_cursor", [])
    monkeypatch.setattr(ports, "_held", type(ports._held)())
    yield tmp_path
    for descriptor in ports._held.values():
        os.close(descriptor)


def test_two_processes_starting_at_the_same_port_are_never_handed_the_same_one(
        own_reservations: Path) -> None:
    environment = {**os.environ, "TMPDIR": str(own_reservations), "PYTHONPATH": str(ROOT)}
    with subprocess.Popen([sys.executable, "-c", CHILD.format(count=TAKEN)], cwd=ROOT,
                          env=environment, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                          text=True) as child:
        assert child.stdout is not None and child.stdin is not None
        theirs = set(json.loads(child.stdout.readline()))
        low, _ = ports.candidate_range()
        ports._cursor[:] = [low]
        ours = {ports.free_port() for _ in range(TAKEN)}
        child.stdin.close()
        child.wait(30)
    assert len(theirs) == len(ours) == TAKEN
    assert not theirs & ours


def test_a_port_something_listens_on_is_skipped(own_reservations: Path) -> None:
    low, _ = ports.candidate_range()
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", low))
        listener.listen(1)
        ports._cursor[:] = [low]
        assert ports.free_port() == low + 1


def test_ports_come_from_below_the_range_the_kernel_hands_out(own_reservations: Path) -> None:
    first, _last = (int(word) for word in ports.EPHEMERAL_RANGE.read_text().split())
    handed = [ports.free_port() for _ in range(20)]
    assert all(ports.FLOOR <= port < first for port in handed)


def test_a_process_keeps_only_its_newest_reservations(
        own_reservations: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ports, "KEPT", 5)
    handed = [ports.free_port() for _ in range(8)]
    assert list(ports._held) == handed[-5:]
