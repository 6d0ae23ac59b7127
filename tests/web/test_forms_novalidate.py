"""The portal's own messages, not the browser's bubbles: every form is ``novalidate``, so that
``required``, ``min`` and ``max`` (kept for assistive technology) never stop a submit with the
browser's tooltip before the portal says what is wrong under the field (issue 58, item 11)."""

from __future__ import annotations

import re

from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from app.web.templating import TEMPLATES_DIR
from tests import factories
from tests.support import oidc
from tests.support.web import HTML

FORM_TAG = re.compile(r"<form\b[^>]*>", re.S)


def test_every_form_of_every_template_leaves_validation_to_the_portal() -> None:
    tags = {(path.relative_to(TEMPLATES_DIR).as_posix(), tag)
            for path in TEMPLATES_DIR.rglob("*.html")
            for tag in FORM_TAG.findall(path.read_text())}
    assert len(tags) > 40  # the walk found the portal's forms
    assert sorted(f"{path}: {tag}" for path, tag in tags
                  if not re.search(r"\snovalidate[\s>]", tag)) == []


def test_the_quota_form_reaches_the_browser_novalidate(client: TestClient, db: Session) -> None:
    acme = factories.tenant(db, "acme")
    factories.gpu_class(db)
    db.commit()
    oidc.sign_in(client, "admin@example.com")
    page = client.get(f"/t/{acme.slug}/quota-requests/new", headers=HTML).text
    [form] = re.findall(r'<form[^>]*id="quota-request-form"[^>]*>', page)
    assert " novalidate " in form and 'name="gpus" min="1"' in page
