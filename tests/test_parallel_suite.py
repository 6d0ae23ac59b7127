"""The suite in parallel: `make test` runs it on pytest-xdist workers, a file (or a group its
modules name) on one worker, and what is the machine's (a lab's network, a fixed port) claimed
by one holder at a time."""

from __future__ import annotations

import re
import subprocess
import sys
import threading
from collections import defaultdict
from pathlib import Path

import pytest
from fastapi import FastAPI, HTTPException
from fastapi.testclient import TestClient

from app.auth.csrf import verify_api_csrf
from app.database.core import Database
from app.kit.config import Settings
from app.process.asgi import create_app
from tests.lab import groups
from tests.support import slots

ROOT = Path(__file__).resolve().parents[1]
RAN = re.compile(r"^\[(gw\d+)\] .*PASSED (\S+?)::(\S+)@(\S+)", re.MULTILINE)


def test_make_test_runs_the_suite_in_parallel_and_names_its_slowest_tests() -> None:
    planned = subprocess.run(["make", "-n", "-C", str(ROOT), "pytest"], capture_output=True,
                             text=True, timeout=60, check=True).stdout
    assert "-m pytest -n " in planned and "--dist loadgroup --no-loadscope-reorder" in planned
    assert "--durations=25" in planned


def test_a_file_runs_on_one_worker_and_a_named_group_keeps_its_name() -> None:
    """Its module fixtures start once, and the lab's modules share the lab of their group."""
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-n", "2", "--dist", "loadgroup", "-v",
         "-p", "no:cacheprovider", "tests/test_crypto.py", "tests/lab/test_machines.py",
         "-k", "test_crypto or kubelet_files or user_data"],
        cwd=ROOT, capture_output=True, text=True, timeout=240, check=False)
    assert done.returncode == 0, done.stdout[-3000:]
    workers: dict[str, set[str]] = defaultdict(set)
    groups: dict[str, set[str]] = defaultdict(set)
    for worker, path, _test, group in RAN.findall(done.stdout):
        workers[path].add(worker)
        groups[path].add(group)
    assert set(workers) == {"tests/test_crypto.py", "tests/lab/test_machines.py"}, done.stdout
    assert all(len(ran_on) == 1 for ran_on in workers.values()), workers
    assert groups == {"tests/test_crypto.py": {"tests/test_crypto.py"},
                      "tests/lab/test_machines.py": {"lab-teams"}}


def test_two_holders_get_different_slots_and_a_released_slot_is_taken_again() -> None:
    with slots.claimed("test-slot") as first, slots.claimed("test-slot") as second:
        assert first != second
    with slots.claimed("test-slot") as again:
        assert again == min(first, second)


def test_a_held_exclusive_name_makes_another_holder_wait_its_bound_then_fail() -> None:
    released = threading.Event()
    with slots.exclusive("test-exclusive", timeout=1):
        failure: list[BaseException] = []

        def second_holder() -> None:
            try:
                with slots.exclusive("test-exclusive", timeout=0.6):
                    released.set()
            except slots.NoFreeSlot as error:
                failure.append(error)

        thread = threading.Thread(target=second_holder)
        thread.start()
        thread.join(timeout=10)
    assert not released.is_set() and failure and "stayed taken" in str(failure[0])
    with slots.exclusive("test-exclusive", timeout=1):
        pass  # free again once its holder let go


@pytest.mark.parametrize("slot", [0, 3])
def test_a_suites_lab_network_is_apart_from_make_labs_and_from_other_slots(slot: int) -> None:
    network = groups.lab_network(slot)
    assert (network.name, network.subnet) != ("plab", "10.213")
    assert network.subnet != groups.lab_network(slot + 1).subnet
    assert len(network.pod(999).namespace) <= 15 and len(f"{network.name}999h") <= 15


def _teapot() -> None:
    raise HTTPException(status_code=418)


def test_apps_share_their_routes_state_yet_one_with_overrides_answers_by_them(
        settings: Settings, database: Database) -> None:
    """tests/support/route_state.py: an app per test, each route's state built once."""
    def tenants(app: FastAPI) -> int:
        with TestClient(app) as client:
            status: int = client.get("/api/v1/tenants").status_code
            return status

    assert tenants(create_app(settings, database)) == 401
    overridden = create_app(settings, database)
    overridden.dependency_overrides[verify_api_csrf] = _teapot
    assert tenants(overridden) == 418
    assert tenants(create_app(settings, database)) == 401
