"""Emission from the cluster reconciler uses the clusters domain's fixtures: acme with 16
approved H100s, and the harness. The real receivers: an SMTP server and an HTTPS webhook
receiver per test, and the portal's settings that reach them."""

from collections.abc import Iterator
from pathlib import Path

import pytest

from app.kit.config import Settings
from tests.clusters.conftest import harness, tenancy
from tests.notifications.endpoint_support import hook_settings
from tests.support.smtp import Mailbox, smtp_server
from tests.support.webhook_receiver import Receiver, webhook_receiver

__all__ = ["harness", "tenancy"]


@pytest.fixture
def mailbox(tmp_path: Path) -> Iterator[Mailbox]:
    with smtp_server(tmp_path) as serving:
        yield serving


@pytest.fixture
def receiver(tmp_path: Path) -> Iterator[Receiver]:
    with webhook_receiver(tmp_path, []) as serving:
        yield serving


@pytest.fixture
def hooked(settings: Settings, tmp_path: Path, receiver: Receiver) -> Settings:
    """Settings whose webhooks may reach ``receiver`` on loopback."""
    return hook_settings(settings, tmp_path, receiver)
