"""The teams' notification emails, read back from the lab's SMTP server: its Maildir
(``.lab/mail``, aiosmtpd's Mailbox handler) holds every message the portal's worker sent.

Each team has an admin (``<tenant>-admin@example.com``, added by the walk through the members
API before anything happens to its tenant): the check waits (bounded) until each admin has
"quota approved" and "cluster Ready" for each of the team's clusters, then says whether every
message an admin got is of their own tenant only, and prints one.
"""

from __future__ import annotations

import mailbox
import re
import time
from collections.abc import Iterable
from dataclasses import dataclass
from email import policy
from email.message import EmailMessage
from email.parser import BytesParser
from pathlib import Path

from app.lab.walk import Report, Team

KIND_HEADER = "X-Portal-Notification-Kind"
# What the lab's server adds: the envelope's recipients.
RCPT_HEADER = "X-RcptTo"
# The worker sends within a pass of its queue; a loaded machine is slow.
MAIL_TIMEOUT = 120.0
_TENANT_LINK = re.compile(r"/t/([a-z0-9-]+)")


def team_admin(tenant: str) -> str:
    return f"{tenant}-admin@example.com"


@dataclass(frozen=True)
class Mail:
    recipients: frozenset[str]
    kind: str
    subject: str
    plain: str
    message: EmailMessage

    @property
    def tenants(self) -> set[str]:
        """The tenants its links name."""
        return set(_TENANT_LINK.findall(self.plain))


def read(maildir: Path) -> list[Mail]:
    """Every message in the Maildir, parsed (none while it does not exist yet)."""
    if not (maildir / "new").is_dir():
        return []
    box = mailbox.Maildir(maildir, create=False)
    found = []
    for key in sorted(box.keys()):
        parsed = BytesParser(policy=policy.default).parsebytes(box.get_bytes(key))
        assert isinstance(parsed, EmailMessage)
        found.append(_mail(parsed))
    return found


def _mail(message: EmailMessage) -> Mail:
    rcpt = str(message.get(RCPT_HEADER) or message.get("To") or "")
    plain = message.get_body(("plain",))
    return Mail(recipients=frozenset(a.strip().lower() for a in rcpt.split(",") if a.strip()),
                kind=str(message.get(KIND_HEADER) or ""), subject=str(message["Subject"] or ""),
                plain=plain.get_content() if plain is not None else "", message=message)


def to(mails: Iterable[Mail], address: str) -> list[Mail]:
    return [m for m in mails if address in m.recipients]


def missing(mails: list[Mail], teams: tuple[Team, ...]) -> list[str]:
    """What each team's admin has not received yet."""
    lacking = []
    for tenant, clusters in _clusters_by_tenant(teams).items():
        own = [m for m in to(mails, team_admin(tenant)) if tenant in m.tenants]
        if not any(m.kind == "quota.decided" and "approved" in m.subject for m in own):
            lacking.append(f"{team_admin(tenant)}: quota approved")
        lacking += [f"{team_admin(tenant)}: cluster {name} Ready" for name in clusters
                    if not any(m.kind == "cluster.ready" and name in m.subject for m in own)]
    return lacking


def _clusters_by_tenant(teams: tuple[Team, ...]) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for team in teams:
        found.setdefault(team.tenant, []).append(team.cluster)
    return found


def check(report: Report, maildir: Path, teams: tuple[Team, ...],
          timeout: float = MAIL_TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    mails = read(maildir)
    while missing(mails, teams) and time.monotonic() < deadline:
        time.sleep(2.0)
        mails = read(maildir)
    lacking = missing(mails, teams)
    report.check("notifications: each team's admin got its quota approved and its clusters "
                 "Ready by email", not lacking,
                 "; ".join(lacking) or f"{len(mails)} messages in {maildir}")
    tenants = sorted(_clusters_by_tenant(teams))
    for tenant in tenants:
        others = [other for other in tenants if other != tenant]
        strays = [m.subject for m in to(mails, team_admin(tenant))
                  if m.tenants - {tenant} or _names_any(m, others)]
        report.check(f"notifications: {team_admin(tenant)} got nothing of another team's",
                     not strays, f"{strays}" if strays else
                     f"{len(to(mails, team_admin(tenant)))} messages, all of {tenant}")
    shown = next((m for m in to(mails, team_admin(teams[0].tenant))
                  if m.kind == "cluster.ready"), None)
    if shown is not None:
        print(describe(shown), flush=True)


def _names_any(mail: Mail, tenants: list[str]) -> bool:
    words = set(re.findall(r"[a-z0-9-]+", f"{mail.subject}\n{mail.plain}".lower()))
    return any(tenant in words for tenant in tenants)


def describe(mail: Mail) -> str:
    """One message as a person reads it: its headers and plain body."""
    message = mail.message
    head = "\n".join(f"  {name}: {message[name]}" for name in ("From", "To", "Subject"))
    body = "\n".join(f"  | {line}".rstrip() for line in mail.plain.rstrip().splitlines())
    return f"== one of the emails, as {message['To']} received it\n{head}\n{body}"
