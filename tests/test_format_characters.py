"""Invisible Unicode format characters (category Cf) never reach what people read.

A right-to-left override makes "acme<U+202E>gnp.exe" read as "acmeexe.png", a zero-width space
makes "acme" and "ac<U+200B>me" two tenants that look alike. Every text field refuses them,
naming the character; tests/test_control_characters.py walks every field of every write.
"""

from __future__ import annotations

import json
import re

import pytest
from fastapi.testclient import TestClient
from markupsafe import Markup
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.auth.sessions import PLAIN_COOKIE
from app.kit.format_characters import visible_format_characters
from app.kit.validation import email_address, multi_line, single_line
from app.portalctl.output import Format, emit
from app.tenants.models import Tenant
from tests.authz.world import World

REFUSED = {
    "\u202e": "U+202E (RIGHT-TO-LEFT OVERRIDE)",
    "\u202a": "U+202A (LEFT-TO-RIGHT EMBEDDING)",
    "\u2066": "U+2066 (LEFT-TO-RIGHT ISOLATE)",
    "\u2069": "U+2069 (POP DIRECTIONAL ISOLATE)",
    "\u200e": "U+200E (LEFT-TO-RIGHT MARK)",
    "\u200b": "U+200B (ZERO WIDTH SPACE)",
    "\u200c": "U+200C (ZERO WIDTH NON-JOINER)",
    "\u200d": "U+200D (ZERO WIDTH JOINER)",
    "\u2060": "U+2060 (WORD JOINER)",
    "\u2064": "U+2064 (INVISIBLE PLUS)",
    "\ufeff": "U+FEFF (ZERO WIDTH NO-BREAK SPACE)",
    "\u00ad": "U+00AD (SOFT HYPHEN)",
    "\U000e0001": "U+E0001 (LANGUAGE TAG)",
    "\U000e0041": "U+E0041 (TAG LATIN CAPITAL LETTER A)",
    "\U000e007f": "U+E007F (CANCEL TAG)",
}
SHOWN_AS_TYPED = ["Acme Research", "Forschung & Entwicklung", "\u0645\u062e\u062a\u0628\u0631",
                  "\u05de\u05e2\u05d1\u05d3\u05d4", "\u0928\u092e\u0938\u094d\u0924\u0947",
                  "\u7814\u7a76\u6240", "e\u0301quipe", "GPUs \U0001f680", "caf\u00e9 \u2014 ok"]


@pytest.mark.parametrize("character", REFUSED)
@pytest.mark.parametrize("rule", [single_line, multi_line])
def test_each_format_character_is_refused_by_name(rule: object, character: str) -> None:
    assert callable(rule)
    with pytest.raises(ValueError, match="must not contain") as refused:
        rule(f"acme{character}research")
    assert str(refused.value) == (f"must not contain {REFUSED[character]}, an invisible "
                                  "formatting character")


def test_an_email_address_with_a_format_character_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match=re.escape("U+200B (ZERO WIDTH SPACE)")):
        email_address("ann\u200b@example.com")


@pytest.mark.parametrize("text", SHOWN_AS_TYPED)
def test_text_in_any_script_is_kept_as_typed(text: str) -> None:
    assert single_line(text) == text and multi_line(f"{text}\n{text}") == f"{text}\n{text}"


RLO_REFUSAL = ("must not contain U+202E (RIGHT-TO-LEFT OVERRIDE), an invisible formatting "
               "character")


def _tenants(db: Session) -> list[str]:
    db.expire_all()
    return list(db.scalars(select(Tenant.slug)).all())


def test_the_api_refuses_a_display_name_that_poses_as_another_naming_field_and_character(
        client: TestClient, world: World, db: Session) -> None:
    before = _tenants(db)
    response = client.post("/api/v1/tenants", headers=world.callers["platform_admin"].headers,
                           json={"slug": "evil", "display_name": "Acme \u202eevil"})
    assert response.status_code == 422
    assert response.json()["errors"] == [{"field": "display_name",
                                          "message": RLO_REFUSAL}]
    assert _tenants(db) == before


def test_the_page_shows_the_refusal_under_the_field_and_stores_nothing(
        client: TestClient, world: World, db: Session) -> None:
    caller = world.callers["platform_admin"]
    client.cookies.set(PLAIN_COOKIE, caller.cookie or "")
    before = _tenants(db)
    page = client.post("/admin/tenants", headers={"x-csrf-token": caller.csrf}, data={
        "slug": "evil", "display_name": "Acme \u202eevil"})
    assert page.status_code == 422
    form = page.text.split('id="tenant-form"', 1)[1]
    field = form.split('name="display_name"', 1)[1].split("</label>", 1)[0]
    assert f'id="display_name-error">{RLO_REFUSAL}</span>' in field
    assert _tenants(db) == before


def test_text_stored_before_the_rule_shows_its_format_characters_instead_of_obeying_them(
        client: TestClient, world: World, db: Session) -> None:
    acme = db.scalars(select(Tenant).where(Tenant.slug == "acme")).one()
    acme.display_name = "Acme \u202egnp.exe"  # as a row from before the rule could hold
    db.commit()
    caller = world.callers["platform_admin"]
    client.cookies.set(PLAIN_COOKIE, caller.cookie or "")
    for url in ("/admin/tenants", "/t/acme"):
        page = client.get(url)
        assert page.status_code == 200
        assert "Acme [U+202E]gnp.exe" in page.text and "\u202e" not in page.text


def test_text_that_holds_no_format_character_is_shown_unchanged() -> None:
    for text in [*SHOWN_AS_TYPED, "line one\nline two"]:
        assert visible_format_characters(text) == text
    assert visible_format_characters("a\u200db\U000e0041") == "a[U+200D]b[U+E0041]"
    # Lines and tabs around it hide none (the quick test skips them, not what they surround).
    assert visible_format_characters("one\n\ttwo\u202e\r\n") == "one\n\ttwo[U+202E]\r\n"
    assert visible_format_characters("no\u00a0break\nspace") == "no\u00a0break\nspace"


def test_markup_stays_markup_with_its_format_characters_written_out() -> None:
    shown = visible_format_characters(Markup("<b>Acme\u202e</b>"))
    assert isinstance(shown, Markup) and shown == Markup("<b>Acme[U+202E]</b>")


def test_portalctl_tables_write_format_characters_out_and_json_keeps_them(
        capsys: pytest.CaptureFixture[str]) -> None:
    tenant = {"slug": "acme", "display_name": "Acme \u202egnp.exe"}
    emit([tenant], Format.table, ["slug", "display_name"])
    assert "Acme [U+202E]gnp.exe" in capsys.readouterr().out
    emit(tenant, Format.json, ["slug", "display_name"])
    assert json.loads(capsys.readouterr().out) == tenant
