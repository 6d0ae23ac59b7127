"""`portalctl audit`: filtered reads and --follow, against the real app."""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from typing import Any

import httpx
import pytest

from app.audit import service as audit_service
from app.portalctl import audit as audit_command
from app.portalctl.audit import Cursor
from app.portalctl.output import Format
from tests.portalctl.conftest import PORTALCTL, Portal, PortalCtl, Result


def test_filters_pick_the_events_and_json_is_the_apis(portal: Portal, portalctl: PortalCtl) -> None:
    portalctl.login(portal, "acme-admin")
    for gpus in (2, 3):
        _request_quota(portal, gpus)
    events = _json(portalctl("audit", "--tenant", "acme", "-o", "json"))
    api = httpx.get(f"{portal.url}/api/v1/audit", params={"tenant": "acme"},
                    headers={"Authorization": f"Bearer {portal.tokens['acme-admin']}"})
    assert events == api.json()["items"]
    quota = _json(portalctl("audit", "--tenant", "acme", "--action", "quota_request.",
                            "-o", "json"))
    assert len(quota) == 2 and all(e["action"].startswith("quota_request.") for e in quota)
    assert quota[0]["id"] > quota[1]["id"]  # newest first
    assert len(_json(portalctl("audit", "--tenant", "acme", "--limit", "1", "-o", "json"))) == 1
    by_someone_else = portalctl("audit", "--tenant", "acme", "--actor", "nobody@example.com",
                                "-o", "json")
    assert _json(by_someone_else) == []
    table = portalctl("audit", "--tenant", "acme").stdout.splitlines()
    assert table[0].split()[:3] == ["ID", "OCCURRED_AT", "ACTOR"]
    request_rows = [line for line in table if "quota_request.create" in line]
    # The target as people say it, not "quota_request 7".
    assert len(request_rows) == 2 and all("quota request #" in line and "(acme)" in line
                                          for line in request_rows)
    bad_time = portalctl("audit", "--since", "yesterday")
    assert bad_time.exit_code == 1 and "since" in bad_time.stderr


def test_the_audit_log_is_for_admins(portal: Portal, portalctl: PortalCtl) -> None:
    portalctl.login(portal, "acme-viewer")
    assert portalctl("audit", "--tenant", "acme").exit_code == 4
    assert portalctl("audit").exit_code == 4


def test_follow_prints_new_events_as_json_lines_until_ctrl_c(
    portal: Portal, portalctl: PortalCtl
) -> None:
    portalctl.login(portal, "acme-admin")
    _request_quota(portal, 1)
    env = {"PATH": os.environ.get("PATH", ""),
           **{k: v for k, v in portalctl.env.items() if v is not None}}
    follower = subprocess.Popen(
        [str(PORTALCTL), "audit", "--tenant", "acme", "--action", "quota_request.", "--follow",
         "--interval", "0.2", "-o", "json"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines = _lines_of(follower)
    try:
        first = json.loads(lines.get(timeout=30))
        assert first["after"]["gpus"] == 1
        created = [_request_quota(portal, gpus) for gpus in (4, 5)]
        followed = [json.loads(lines.get(timeout=30)) for _ in created]
        assert [e["after"]["gpus"] for e in followed] == [4, 5]
        assert [e["target_id"] for e in followed] == [str(r["id"]) for r in created]
    finally:
        follower.send_signal(signal.SIGINT)
        _, errors = follower.communicate(timeout=30)
    assert follower.returncode == 0, errors
    assert "Traceback" not in errors and "Aborted" not in errors


class _PollInterrupted:
    """A client whose first poll is under way when Ctrl-C arrives (SIGINT to this process)."""

    def __init__(self) -> None:
        self.polls = 0
        self.finished = 0

    def items(self, path: str, *args: Any, **filters: Any) -> list[dict[str, Any]]:
        self.polls += 1
        threading.Timer(0.05, os.kill, (os.getpid(), signal.SIGINT)).start()
        time.sleep(0.5)  # the interrupt lands here, as inside an HTTP request
        self.finished += 1
        return [_event(self.polls)]


def test_ctrl_c_during_a_poll_lets_it_finish_and_ends_following(
        capsys: pytest.CaptureFixture[str]) -> None:
    before = signal.getsignal(signal.SIGINT)
    client = _PollInterrupted()
    with audit_command._until_ctrl_c() as stopped:
        audit_command._follow(client, {}, [], 0.01, Format.json,  # type: ignore[arg-type]
                              stopped)
    # the poll was not broken off, its event printed, and no poll began after it
    assert (client.polls, client.finished) == (1, 1)
    assert [json.loads(line)["id"] for line in capsys.readouterr().out.splitlines()] == [1]
    assert signal.getsignal(signal.SIGINT) is before


CTRL_C_ANYWHERE = """
import os, signal, threading
from app.portalctl import audit
from app.portalctl.output import Format

class NoEvents:
    def items(self, path, *args, **filters):
        return []

for _ in range(200):
    with audit._until_ctrl_c() as stopped:  # Ctrl-C only once it is listened for
        threading.Timer(0.002, os.kill, (os.getpid(), signal.SIGINT)).start()
        audit._follow(NoEvents(), {}, [], 0.0, Format.json, stopped)
"""


def test_ctrl_c_ends_following_wherever_it_lands_in_the_loop() -> None:
    """200 Ctrl-Cs into a loop that polls without pause: each ends it. A handler that set a
    ``threading.Event`` deadlocked on the first, landing while the loop's wait held its lock."""
    try:
        ran = subprocess.run([sys.executable, "-c", CTRL_C_ANYWHERE], capture_output=True,
                             text=True, timeout=60, check=False)
    except subprocess.TimeoutExpired:
        pytest.fail("a Ctrl-C left `portalctl audit --follow` hanging")
    assert ran.returncode == 0, ran.stderr


def test_following_shows_late_committed_events_once_and_nothing_older_than_the_start() -> None:
    cursor = Cursor([_event(10), _event(12)])
    assert _ids(cursor.advance(_events(14, 13, 12, 10, 9, 8))) == [13, 14]
    assert _ids(cursor.advance(_events(15, 14, 13, 12, 11, 10, 9))) == [11, 15]
    assert cursor.advance(_events(15, 14, 13, 12, 11, 10)) == []
    assert _ids(Cursor([]).advance(_events(3, 2, 1))) == [1, 2, 3]


def _lines_of(process: subprocess.Popen[str]) -> queue.Queue[str]:
    """The process's stdout lines, to wait for with a timeout."""
    lines: queue.Queue[str] = queue.Queue()
    assert process.stdout is not None
    stdout = process.stdout

    def read() -> None:
        for line in stdout:
            lines.put(line)

    threading.Thread(target=read, daemon=True).start()
    return lines


def _request_quota(portal: Portal, gpus: int) -> dict[str, Any]:
    response = httpx.post(f"{portal.url}/api/v1/tenants/acme/quota-requests",
                          headers={"Authorization": f"Bearer {portal.tokens['acme-admin']}"},
                          json={"gpu_class_id": portal.h100_id, "gpus": gpus, "reason": "more"})
    response.raise_for_status()
    body: dict[str, Any] = response.json()
    return body


def _event(event_id: int) -> dict[str, Any]:
    return {"id": event_id, "action": "quota.request"}


def _events(*ids: int) -> list[dict[str, Any]]:
    return [_event(i) for i in ids]


def _ids(events: list[dict[str, Any]]) -> list[int]:
    return [int(e["id"]) for e in events]


def _json(result: Result) -> Any:
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


def test_sign_ins_are_listed_unless_left_out(portal: Portal, portalctl: PortalCtl) -> None:
    with portal.database.session() as db:
        audit_service.record(db, action="auth.sign_in", actor_id=None,
                             actor_label="carol@example.com", target_type="user", target_id=9)
        db.commit()
    portalctl.login(portal, "platform-admin")
    _request_quota(portal, 1)
    everything = {e["action"] for e in _json(portalctl("audit", "-o", "json"))}
    assert {"auth.sign_in", "quota_request.create"} <= everything
    quiet = {e["action"] for e in _json(portalctl("audit", "--no-sign-ins", "-o", "json"))}
    assert "auth.sign_in" not in quiet and "quota_request.create" in quiet
