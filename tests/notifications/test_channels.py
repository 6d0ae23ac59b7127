"""The channels against real servers: emails read back from a real SMTP server (aiosmtpd:
STARTTLS, AUTH), webhooks posted to a real HTTPS receiver that checks their signatures with its
own code; what a receiver's answer means; and no field but a kind's named ones in a message."""

from __future__ import annotations

import base64
import hashlib
import hmac
import ipaddress
import json
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from email.message import EmailMessage
from pathlib import Path
from typing import Any

import pytest

from app.kit import outbound
from app.notifications import signing
from app.notifications.email import SmtpSettings, send_batch, settings_problem
from app.notifications.messages import Event, cloudevent_body, email_message, slack_body
from app.notifications.outcomes import Outcome
from app.notifications.texts import KINDS
from app.notifications.webhooks import Endpoint, Network, deliver, request_for
from tests.support.smtp import SENDER, Mailbox, smtp_server
from tests.support.web import free_port
from tests.support.webhook_receiver import Receiver, signature_problem, webhook_receiver

pytestmark = pytest.mark.spread

BASE_URL = "https://portal.example.com"
LOOPBACK = [ipaddress.ip_network("127.0.0.1/32")]
WHEN = datetime(2026, 12, 7, 9, 30, tzinfo=UTC)
SECRET_MARK = "SECRET-do-not-send"


def _event(kind: str = "cluster.ready", **payload: Any) -> Event:
    values: dict[str, Any] = {"tenant": "acme", "cluster": "train",
                              "path": "/tenants/acme/clusters/train"}
    return Event(str(uuid.uuid4()), kind, values | payload, WHEN)


def _mail(event: Event, to: str = "alice@example.com") -> EmailMessage:
    return email_message(event, base_url=BASE_URL, sender=SENDER, recipient=to)


def _plain(message: EmailMessage) -> str:
    part = message.get_body(("plain",))
    assert part is not None
    return str(part.get_content())


def _everything(message: EmailMessage) -> str:
    """Every header and every part's decoded text (a part's transfer encoding would hide a
    string from a search of the raw bytes)."""
    texts = [f"{name}: {value}" for name, value in message.items()]
    texts += [str(part.get_content()) for part in message.walk() if not part.is_multipart()]
    return "\n".join(texts)


def test_an_email_arrives_over_starttls_and_auth_with_both_parts_a_link_and_its_ids(
        mailbox: Mailbox) -> None:
    event = _event()
    batch = send_batch(mailbox.settings(), [_mail(event)])

    assert [r.outcome for r in batch.results] == [Outcome.DELIVERED]
    assert batch.server_problem is None
    assert mailbox.logins == ["portal-mailer"]
    [got] = mailbox.to("alice@example.com")
    assert mailbox.envelopes[0][0] == "portal@example.com"
    assert got["Subject"] == "Cluster train is Ready"
    assert got["Message-ID"] == f"<{event.uid}@portal.example.com>"
    assert got["X-Portal-Notification-Id"] == event.uid
    assert got.get_content_type() == "multipart/alternative"
    html = got.get_body(("html",))
    assert html is not None
    page = "https://portal.example.com/tenants/acme/clusters/train"
    assert "Cluster train of tenant acme is Ready" in _plain(got)
    assert page in _plain(got)
    assert f'<a href="{page}"' in html.get_content()
    assert "Cluster train of tenant acme is Ready" in html.get_content()


@pytest.mark.filterwarnings("ignore:Requiring AUTH while not requiring TLS")
def test_tls_from_the_first_byte(tmp_path: Path) -> None:
    with smtp_server(tmp_path, implicit_tls=True) as implicit:
        batch = send_batch(implicit.settings(security="tls"), [_mail(_event())])
        assert [r.outcome for r in batch.results] == [Outcome.DELIVERED]
        assert implicit.logins == ["portal-mailer"] and len(implicit.messages) == 1
        # The same server spoken to in plain text first: STARTTLS is not on offer.
        refused = send_batch(implicit.settings(timeout_seconds=2), [_mail(_event())])
        assert refused.results[0].outcome is Outcome.RETRY


def test_a_name_in_an_email_is_text_never_markup(mailbox: Mailbox) -> None:
    send_batch(mailbox.settings(), [_mail(_event(cluster="<b>x</b>&"))])
    [got] = mailbox.messages
    html = got.get_body(("html",))
    assert html is not None
    assert "&lt;b&gt;x&lt;/b&gt;&amp;" in html.get_content()
    assert "<b>x</b>" not in html.get_content()


def test_one_bad_recipient_fails_only_its_own_message(mailbox: Mailbox) -> None:
    mailbox.refuse["gone@example.com"] = "550 5.1.1 No such user here"
    mailbox.refuse["busy@example.com"] = "450 4.2.1 Mailbox busy, try later"
    batch = send_batch(mailbox.settings(), [
        _mail(_event(), "alice@example.com"), _mail(_event(), "gone@example.com"),
        _mail(_event(), "busy@example.com"), _mail(_event(), "bob@example.com")])

    assert [r.outcome for r in batch.results] == [
        Outcome.DELIVERED, Outcome.PERMANENT, Outcome.RETRY, Outcome.DELIVERED]
    assert "550" in batch.results[1].detail and "No such user" in batch.results[1].detail
    assert "450" in batch.results[2].detail
    assert [rcpt for _, rcpt in mailbox.envelopes] == [["alice@example.com"],
                                                        ["bob@example.com"]]
    assert mailbox.logins == ["portal-mailer"]  # one connection for the batch


def test_a_connection_lost_mid_batch_leaves_the_rest_for_later(mailbox: Mailbox) -> None:
    mailbox.hang_up_at.add("carol@example.com")
    batch = send_batch(mailbox.settings(), [
        _mail(_event(), "alice@example.com"), _mail(_event(), "carol@example.com"),
        _mail(_event(), "bob@example.com")])

    assert [r.outcome for r in batch.results] == [
        Outcome.DELIVERED, Outcome.RETRY, Outcome.RETRY]
    assert [rcpt for _, rcpt in mailbox.envelopes] == [["alice@example.com"]]


def test_a_wrong_password_is_permanent_and_nothing_is_sent(mailbox: Mailbox) -> None:
    batch = send_batch(mailbox.settings(password="not-the-password"), [_mail(_event())] * 2)

    assert [r.outcome for r in batch.results] == [Outcome.PERMANENT] * 2
    assert batch.server_problem is not None and "535" in batch.server_problem
    assert "not-the-password" not in batch.server_problem
    assert mailbox.messages == []


def test_a_server_that_is_down_means_later(tmp_path: Path) -> None:
    settings = SmtpSettings(host="127.0.0.1", port=free_port(), sender=SENDER,
                            timeout_seconds=5, local_hostname="portal.test")
    batch = send_batch(settings, [_mail(_event())] * 3)

    assert [r.outcome for r in batch.results] == [Outcome.RETRY] * 3
    assert batch.server_problem is not None and "could not reach" in batch.server_problem


def test_a_server_that_never_answers_is_given_up_within_the_timeout() -> None:
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        settings = SmtpSettings(host="127.0.0.1", port=silent.getsockname()[1], sender=SENDER,
                                timeout_seconds=0.5, local_hostname="portal.test")
        started = time.monotonic()
        batch = send_batch(settings, [_mail(_event())])
    assert time.monotonic() - started < 5
    assert batch.results[0].outcome is Outcome.RETRY


def test_the_servers_certificate_is_checked(mailbox: Mailbox) -> None:
    # Without the server's CA file the system's CAs do not trust its certificate.
    batch = send_batch(mailbox.settings(ca_file=None), [_mail(_event())])

    assert batch.results[0].outcome is Outcome.RETRY
    assert batch.server_problem is not None and "certificate" in batch.server_problem.lower()
    assert mailbox.messages == [] and mailbox.logins == []


def test_no_tls_only_to_a_loopback_relay() -> None:
    remote = SmtpSettings(host="smtp.example.com", sender=SENDER, security="none")
    problem = settings_problem(remote)
    assert problem is not None and "loopback" in problem
    assert send_batch(remote, [_mail(_event())]).results[0].outcome is Outcome.RETRY
    assert settings_problem(SmtpSettings(host="127.0.0.1", sender=SENDER, security="none")) \
        is None
    assert settings_problem(SmtpSettings(host="", sender=SENDER)) is not None


# -- webhooks ---------------------------------------------------------------------------------


@pytest.fixture
def secret() -> str:
    return signing.new_secret()


@pytest.fixture
def receiver(tmp_path: Path, secret: str) -> Iterator[Receiver]:
    with webhook_receiver(tmp_path, [secret]) as served:
        yield served


def _network(receiver: Receiver) -> Network:
    return Network(allowed=LOOPBACK, ssl_context=receiver.trusting())


def _deliver(receiver: Receiver, endpoint: Endpoint, event: Event) -> Any:
    return deliver(endpoint, event, base_url=BASE_URL, now=datetime.now(UTC),
                   network=_network(receiver))


def test_a_slack_body_arrives_signed_and_verified(receiver: Receiver, secret: str) -> None:
    event = _event()
    sent = _deliver(receiver, Endpoint(receiver.url, "slack", (secret,)), event)

    assert sent.outcome is Outcome.DELIVERED
    [got] = receiver.accepted()
    assert got.id == event.uid and got.refused is None
    assert got.headers["content-type"] == "application/json"
    body = json.loads(got.body)
    assert body["text"].startswith("Cluster train is Ready")
    blocks = json.dumps(body["blocks"])
    assert "<https://portal.example.com/tenants/acme/clusters/train|Open in the portal>" in blocks


def test_a_cloudevent_arrives_signed_and_verified(receiver: Receiver, secret: str) -> None:
    event = _event()
    sent = _deliver(receiver, Endpoint(receiver.url, "cloudevents", (secret,)), event)

    assert sent.outcome is Outcome.DELIVERED
    [got] = receiver.accepted()
    assert got.headers["content-type"].startswith("application/cloudevents+json")
    body = json.loads(got.body)
    assert {k: body[k] for k in ("specversion", "id", "source", "type", "subject", "time")} == {
        "specversion": "1.0", "id": event.uid, "source": BASE_URL,
        "type": "dev.gpu-tenant-portal.cluster.ready",
        "subject": "/tenants/acme/clusters/train", "time": "2026-12-07T09:30:00Z"}
    assert body["data"] == {"tenant": "acme", "cluster": "train",
                            "summary": "Cluster train is Ready",
                            "url": "https://portal.example.com/tenants/acme/clusters/train"}


def test_a_rolled_secret_signs_twice_and_either_receiver_verifies(tmp_path: Path) -> None:
    old, new = signing.new_secret(), signing.new_secret()
    endpoint_secrets = (new, old)
    for number, knows in enumerate((old, new)):
        with webhook_receiver(tmp_path / str(number), [knows]) as receiver:
            sent = _deliver(receiver, Endpoint(receiver.url, "cloudevents", endpoint_secrets),
                            _event())
            assert sent.outcome is Outcome.DELIVERED
            [got] = receiver.accepted()
            assert len(got.headers["webhook-signature"].split(" ")) == 2


def test_a_tampered_body_fails_verification(receiver: Receiver, secret: str) -> None:
    endpoint = Endpoint(receiver.url, "slack", (secret,))
    body, headers = request_for(endpoint, _event(), base_url=BASE_URL, now=datetime.now(UTC))
    tampered = body.replace(b"Ready", b"Gone!")

    answer = outbound.post(receiver.url, tampered, headers, allowed=LOOPBACK,
                           ssl_context=receiver.trusting())
    assert answer.status == 401
    assert receiver.received[0].refused == "no signature matches"
    assert receiver.accepted() == []
    with pytest.raises(signing.BadSignature, match="no signature matches"):
        signing.verify(secret, headers, tampered, time.time())
    assert signing.verify(secret, headers, body, time.time()) == headers["webhook-id"]


def test_a_replay_and_another_secret_fail_verification(secret: str) -> None:
    body = b'{"n":1}'
    stamp = int(time.time()) - 600
    headers = signing.signed_headers("msg-1", stamp, body, [secret])
    with pytest.raises(signing.BadSignature, match="too far"):
        signing.verify(secret, headers, body, time.time())
    assert signature_problem([secret], headers, body, time.time()) is not None
    fresh = signing.signed_headers("msg-1", int(time.time()), body, [secret])
    assert signature_problem([signing.new_secret()], fresh, body, time.time()) is not None
    assert signature_problem([secret], fresh, body, time.time()) is None


def test_the_signature_is_the_spec_s_hmac_of_id_timestamp_and_body() -> None:
    key = bytes(range(32))
    secret = "whsec_" + base64.b64encode(key).decode()
    expected = base64.b64encode(
        hmac.new(key, b"msg_1.1674087231.{}", hashlib.sha256).digest()).decode()
    assert signing.signature(secret, "msg_1", 1674087231, b"{}") == f"v1,{expected}"
    assert signing.new_secret().startswith("whsec_")
    assert len(signing.secret_key(signing.new_secret())) == 32
    for bad in ("whsec_%%%", "sk_" + base64.b64encode(key).decode(), "whsec_" + "QQ=="):
        with pytest.raises(ValueError, match="signing secret"):
            signing.secret_key(bad)


@pytest.mark.parametrize(("status", "outcome"), [
    (200, Outcome.DELIVERED), (204, Outcome.DELIVERED),
    (301, Outcome.PERMANENT), (302, Outcome.PERMANENT),
    (400, Outcome.PERMANENT), (404, Outcome.PERMANENT), (410, Outcome.PERMANENT),
    (408, Outcome.RETRY), (409, Outcome.RETRY), (425, Outcome.RETRY), (429, Outcome.RETRY),
    (500, Outcome.RETRY), (503, Outcome.RETRY),
])
def test_a_receivers_answer_is_classified(receiver: Receiver, secret: str, status: int,
                                          outcome: Outcome) -> None:
    receiver.status = status
    sent = _deliver(receiver, Endpoint(receiver.url, "slack", (secret,)), _event())
    assert sent.outcome is outcome
    assert f"HTTP {status}" in sent.detail


def test_a_failing_receiver_gets_the_same_id_until_it_accepts(receiver: Receiver,
                                                              secret: str) -> None:
    receiver.fail_next(2, 503)
    endpoint = Endpoint(receiver.url, "cloudevents", (secret,))
    event = _event()
    outcomes = [_deliver(receiver, endpoint, event).outcome for _ in range(3)]

    assert outcomes == [Outcome.RETRY, Outcome.RETRY, Outcome.DELIVERED]
    assert {r.id for r in receiver.received} == {event.uid}
    assert [r.status for r in receiver.received] == [503, 503, 200]


def test_an_address_the_portal_does_not_call_is_permanent(receiver: Receiver,
                                                          secret: str) -> None:
    sent = deliver(Endpoint(receiver.url, "slack", (secret,)), _event(), base_url=BASE_URL,
                   now=datetime.now(UTC), network=Network(ssl_context=receiver.trusting()))
    assert sent.outcome is Outcome.PERMANENT and sent.refused_address
    assert "loopback" in sent.detail
    assert receiver.received == []


def test_a_name_that_does_not_resolve_and_a_closed_port_mean_later(secret: str) -> None:
    def unresolved(*_: Any) -> list[tuple[Any, ...]]:
        raise socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution")
    sent = deliver(Endpoint("https://hooks.example.com/x", "slack", (secret,)), _event(),
                   base_url=BASE_URL, now=datetime.now(UTC), network=Network(resolve=unresolved))
    assert sent.outcome is Outcome.RETRY and not sent.refused_address

    closed = deliver(Endpoint(f"https://127.0.0.1:{free_port()}/x", "slack", (secret,)),
                     _event(), base_url=BASE_URL, now=datetime.now(UTC),
                     network=Network(allowed=LOOPBACK))
    assert closed.outcome is Outcome.RETRY


def test_a_held_request_is_answered_once_released(receiver: Receiver, secret: str) -> None:
    receiver.hold()
    results: list[Any] = []
    worker = threading.Thread(target=lambda: results.append(
        _deliver(receiver, Endpoint(receiver.url, "slack", (secret,)), _event())))
    worker.start()
    time.sleep(0.3)
    assert results == []
    receiver.release()
    worker.join(30)
    assert results[0].outcome is Outcome.DELIVERED


# -- what a message may show ------------------------------------------------------------------


_HIDDEN = {"token": f"sk-live-{SECRET_MARK}", "kubeconfig": f"apiVersion: v1 # {SECRET_MARK}",
           "bmc_password": SECRET_MARK, "before": {"password": SECRET_MARK}}
_NAMED = {"tenant": "acme", "cluster": "train", "gpus": 4, "gpu_class": "h100", "region": "eu",
          "request": "qr-7", "quota": "h100-eu", "count": 3, "host": "host-a", "machine": "m-1",
          "template": "training", "endpoint": "team-chat", "reason": "no capacity",
          "items": [{"cluster": "train", "pod": "p-1", "token": SECRET_MARK}]}


@pytest.mark.parametrize("kind", [*KINDS, "some.future_kind"])
def test_only_a_kinds_named_fields_are_written_into_any_message(kind: str) -> None:
    event = _event(kind, **_NAMED, **_HIDDEN)
    mail = _everything(_mail(event))
    slack = slack_body(event, base_url=BASE_URL).body.decode()
    cloud = cloudevent_body(event, base_url=BASE_URL).body.decode()

    for written in (mail, slack, cloud):
        assert SECRET_MARK not in written
        assert "sk-live" not in written
    if kind in KINDS:
        shown = [value for field, value in _NAMED.items() if field in KINDS[kind].fields]
        assert shown, f"{kind} shows none of the named fields"
        for value in shown:
            assert str(value) in mail and str(value) in cloud


def test_an_unknown_kind_gets_a_plain_generic_message() -> None:
    event = _event("some.future_kind", tenant="acme")
    mail = _mail(event)
    assert mail["Subject"] == "Notification from the GPU Tenant Portal"
    assert "https://portal.example.com/tenants/acme/clusters/train" in _plain(mail)
    assert json.loads(cloudevent_body(event, base_url=BASE_URL).body)["type"] == \
        "dev.gpu-tenant-portal.some.future_kind"


def test_counts_and_missing_fields_read_right() -> None:
    one = _mail(_event("quota.requested", gpus=1, gpu_class="h100", region="eu"))
    many = _mail(_event("quota.requested", gpus=4, gpu_class="h100", region="eu"))
    missing = _mail(_event("cluster.failed"))
    assert "asked for 1 GPU of class h100 in eu" in _plain(one)
    assert "asked for 4 GPUs of class h100 in eu" in _plain(many)
    assert "failed (—)" in _plain(missing)
    expiring = _mail(_event("kubeconfig.expiring",
                            expires_at=(WHEN + timedelta(hours=20)).isoformat()))
    assert expiring["Subject"] == "Your kubeconfig for train expires on 8 Dec 2026 at 05:30 UTC"


def test_a_digest_lists_its_items_up_to_a_bound() -> None:
    items = [{"cluster": f"c{n}", "pod": f"p{n}", "at": "2026-12-07T09:00:00Z"}
             for n in range(60)]
    event = _event("gpus.reclaimed", count=60, items=items)
    plain = _plain(_mail(event))
    assert "from 60 pods" in plain
    assert "Cluster: c0, Pod: p0, When: 2026-12-07 09:00 UTC" in plain
    assert "Cluster: c49," in plain
    assert "Cluster: c50," not in plain and "and 10 more" in plain
    slack = json.loads(slack_body(event, base_url=BASE_URL).body)
    assert "and 40 more" in json.dumps(slack["blocks"])
