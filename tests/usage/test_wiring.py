"""Every process that changes quotas, nodes or clusters writes the ledger: the web app, the
worker and the CLI each load its session hooks (checked in a fresh interpreter, no conftest)."""

from __future__ import annotations

import subprocess
import sys

import pytest

_REPORT = """
import sys
from sqlalchemy import event
from sqlalchemy.orm import Session
ledger = sys.modules.get("app.usage.ledger")
print("flush", ledger is not None and event.contains(
    Session, "after_flush", ledger._record_flushed_changes))
print("bulk", ledger is not None and event.contains(
    Session, "do_orm_execute", ledger._record_bulk_changes))
"""


@pytest.mark.parametrize("start", [
    "from app.process.asgi import create_app; create_app()",
    "from app.kit.config import Settings; from app.database.core import Database; "
    "from app.kube.connector import ClientConnector; "
    "from app.process.worker import build_kinds; s = Settings(); "
    "build_kinds(s, Database('sqlite://'), ClientConnector(s))",
    "from app.process import cli",
    "import app.process.all_models",
], ids=["web", "worker", "cli", "models"])
def test_every_entry_point_records_the_ledger(start: str) -> None:
    out = subprocess.run([sys.executable, "-c", start + "\n" + _REPORT], capture_output=True,
                         text=True, check=True, env={"PORTAL_DATABASE_URL": "sqlite://",
                                                     "PATH": ""})
    assert out.stdout.split() == ["flush", "True", "bulk", "True"]
