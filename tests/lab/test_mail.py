"""The lab's SMTP server and the demo's mail check, without a lab: aiosmtpd started as the lab
starts it (plain SMTP on loopback, a Maildir), the portal's emails sent to it as the worker
sends them, and the check that each team's admin got its own tenant's news and nobody else's."""

from __future__ import annotations

import contextlib
from datetime import UTC, datetime
from pathlib import Path

import pytest

from app.kit.config import Settings
from app.lab import demo, mail
from app.lab.main import MAIL_SENDER, Lab, LabOptions
from app.lab.walk import Report
from app.notifications.email import SmtpSettings, send_batch
from app.notifications.messages import Event, email_message

BASE_URL = "http://127.0.0.1:8000"


def _decided(tenant: str) -> Event:
    return Event(f"{tenant}-decided", "quota.decided", {
        "tenant": tenant, "request": f"H100 quota request #1 ({tenant})", "decision": "approved",
        "gpus": 3, "approved_gpus": 3, "path": f"/t/{tenant}"}, datetime.now(UTC))


def _ready(tenant: str, cluster: str) -> Event:
    return Event(f"{tenant}-{cluster}-ready", "cluster.ready", {
        "tenant": tenant, "cluster": cluster, "cluster_id": 1,
        "path": f"/t/{tenant}/clusters/{cluster}"}, datetime.now(UTC))


def _send(port: int, sent: list[tuple[Event, str]]) -> None:
    settings = SmtpSettings(host="127.0.0.1", port=port, security="none", sender=MAIL_SENDER)
    result = send_batch(settings, [
        email_message(event, base_url=BASE_URL, sender=MAIL_SENDER, recipient=to)
        for event, to in sent])
    assert result.server_problem is None


def _every_team_told() -> list[tuple[Event, str]]:
    told = []
    for team in demo.TEAMS:
        admin = mail.team_admin(team.tenant)
        told += [(_decided(team.tenant), admin), (_ready(team.tenant, team.cluster), admin)]
    return told


def test_the_lab_keeps_the_portals_emails_and_the_demo_reads_each_teams_own(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    running = Lab(LabOptions(folder=tmp_path / ".lab"))
    running.folder.mkdir(parents=True)
    with contextlib.ExitStack() as stack:
        running._start_mail(stack)
        settings = Settings(env="test", smtp_host="127.0.0.1", smtp_port=running.smtp_port,
                            smtp_security="none")
        assert settings.smtp_security == "none"  # plain SMTP, allowed to loopback only
        _send(running.smtp_port, _every_team_told())
        report = Report()
        mail.check(report, running.maildir, demo.TEAMS, timeout=10)
        assert report.passed, [c for c in report.checks if not c.passed]
        shown = capsys.readouterr().out
        assert "To: acme-admin@example.com" in shown and "Subject: Cluster train is Ready" in shown
        assert f"{BASE_URL}/t/acme/clusters/train" in shown

        _send(running.smtp_port, [(_ready("acme", "train"), mail.team_admin("globex"))])
        strays = Report()
        mail.check(strays, running.maildir, demo.TEAMS, timeout=1)
        assert [c.name for c in strays.failures()] == [
            "notifications: globex-admin@example.com got nothing of another team's"]


def test_a_team_whose_mail_never_came_fails_the_check_after_the_wait(tmp_path: Path) -> None:
    running = Lab(LabOptions(folder=tmp_path / ".lab"))
    running.folder.mkdir(parents=True)
    with contextlib.ExitStack() as stack:
        running._start_mail(stack)
        _send(running.smtp_port, [(e, to) for e, to in _every_team_told()
                                  if not (to.startswith("initech") and e.kind == "cluster.ready"
                                          and "pretrain" in e.uid)])
        report = Report()
        mail.check(report, running.maildir, demo.TEAMS, timeout=1)
    (failed,) = report.failures()
    assert "initech-admin@example.com: cluster pretrain Ready" in failed.detail
