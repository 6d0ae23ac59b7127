"""A refused HTML form answers one way: ``submitted`` in app/web/forms.py shows the form again,
and ``field`` in templates/_macros.html writes each field with its error. These tests keep the
hand-written copies from coming back."""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, ValidationError
from starlette.requests import Request
from starlette.responses import Response

from app.kit.errors import Conflict, ValidationFailed
from app.kit.limits import Limit, LimitReached
from app.web.forms import REFUSALS, Refusal, in_row, submitted
from app.web.templating import TEMPLATES_DIR, templates

APP = Path(__file__).resolve().parents[2] / "app"
MACROS = TEMPLATES_DIR / "_macros.html"
# An element of class field-error showing one field's error (the whole form's is not a field's).
FIELD_ERROR_BY_HAND = re.compile(
    r"""class="[^"]*field-error[^"]*"[^>]*>[^<]*\{\{[^}]*errors(?:\.get\(|\[)\s*["'](?!form["'])""")


def html_routers() -> list[Path]:
    return sorted([*APP.rglob("web.py"), *APP.rglob("*_web.py")])


def handlers_answering_refusals(source: str, namespace: dict[str, Any]) -> list[int]:
    """Lines of ``except`` clauses that catch a refusal and do more than raise another error:
    a form shown again by hand instead of through ``submitted``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.ExceptHandler) or node.type is None:
            continue
        caught = node.type.elts if isinstance(node.type, ast.Tuple) else [node.type]
        classes = [eval(compile(ast.Expression(c), "<except>", "eval"), namespace)  # noqa: S307
                   for c in caught]
        translated = all(isinstance(statement, ast.Raise) for statement in node.body)
        if any(issubclass(c, REFUSALS) for c in classes) and not translated:
            found.append(node.lineno)
    return found


def module_of(path: Path) -> dict[str, Any]:
    name = ".".join(path.relative_to(APP.parent).with_suffix("").parts)
    return vars(importlib.import_module(name))


def test_no_html_router_catches_a_refusal_to_answer_by_itself() -> None:
    routers = html_routers()
    assert len(routers) >= 12, routers  # every domain's web.py, token_web.py, audit_web.py
    by_hand = {f"{path.relative_to(APP.parent)}:{line}"
               for path in routers
               for line in handlers_answering_refusals(path.read_text(), module_of(path))}
    assert not by_hand, (
        f"{sorted(by_hand)} catch a ValidationError, ValidationFailed or Conflict and answer "
        "themselves: run the form's action through app.web.forms.submitted instead")


def test_the_check_sees_a_form_shown_again_by_hand() -> None:
    old_shape = """
try:
    save()
except ValidationError as error:
    page = form_page(validation_errors(error), 422)
except (ValidationFailed, Conflict) as error:
    return form_page(problem_errors(error), error.status)
except LimitReached as error:
    return form_page({"form": error.detail}, 409)
try:
    parse()
except ValidationError as error:
    raise ValidationFailed.on_field("since", "a date") from error
except KeyError:
    return None
"""
    namespace = {"ValidationError": ValidationError, "ValidationFailed": ValidationFailed,
                 "Conflict": Conflict, "LimitReached": type("LimitReached", (Conflict,), {})}
    assert handlers_answering_refusals(old_shape, namespace) == [4, 6, 8]


def test_no_template_ties_a_field_to_its_error_by_hand() -> None:
    by_hand = []
    for path in sorted(TEMPLATES_DIR.rglob("*.html")):
        if path == MACROS:
            continue
        text = path.read_text()
        if "aria-invalid" in text or FIELD_ERROR_BY_HAND.search(text):
            by_hand.append(str(path.relative_to(TEMPLATES_DIR)))
    assert not by_hand, (f"{by_hand} write a field's error by hand: use the field macro of "
                         "_macros.html")


def test_the_template_check_sees_an_error_written_by_hand() -> None:
    assert FIELD_ERROR_BY_HAND.search(
        '{% if errors.get("slug") %}<span class="field-error">{{ errors["slug"] }}</span>')
    assert FIELD_ERROR_BY_HAND.search('<p class="field-error" id="x">{{ policy_errors.get("a") }}')
    assert not FIELD_ERROR_BY_HAND.search(
        '<p class="field-error" role="alert">{{ errors.get("form", "") }}</p>')


# ----- what a person sees


def render_field(error: str) -> str:
    page = templates.env.from_string(
        '{% from "_macros.html" import field %}'
        '{% call(tied) field("gpus", error) %}GPUs <input name="gpus" value="7" {{ tied }}>'
        '{% endcall %}')
    return page.render(error=error)


def test_a_field_with_an_error_is_marked_invalid_and_says_why() -> None:
    html = render_field("at most 8 <GPUs>")
    assert '<input name="gpus" value="7" aria-invalid="true" aria-describedby="gpus-error">' \
        in html
    assert '<span class="field-error" role="alert" id="gpus-error">at most 8 &lt;GPUs&gt;</span>' \
        in html
    assert html.startswith("<label>GPUs") and html.endswith("</label>")


def test_a_field_without_an_error_keeps_an_empty_slot_and_is_not_invalid() -> None:
    html = render_field("")
    assert 'aria-invalid' not in html
    assert 'aria-describedby="gpus-error"' in html
    assert '<span class="field-error" role="alert" id="gpus-error"></span>' in html


class Size(BaseModel):
    gpus: int


def shown(errors: dict[str, str], status: int) -> Response:
    return Response(repr(sorted(errors.items())), status_code=status)


def refused_with(error: Exception) -> Response:
    def action() -> Response:
        raise error

    return submitted(action, lambda refusal: shown(refusal.errors, refusal.status))


def schema_error() -> ValidationError:
    try:
        Size.model_validate({"gpus": "many"})
    except ValidationError as error:
        return error
    raise AssertionError("the schema took 'many' GPUs")


LIMIT = Limit("clusters", "clusters", "PORTAL_TENANT_MAX_CLUSTERS", 2)


@pytest.mark.parametrize(("error", "status", "body"), [
    (schema_error(), 422, "[('gpus', 'a whole number, such as 4')]"),
    (ValidationFailed.on_field("gpus", "at most 8"), 422,
     "[('form', 'at most 8'), ('gpus', 'at most 8')]"),
    (Conflict("the cluster is being deleted"), 409, "[('form', 'the cluster is being deleted')]"),
    (LimitReached(LIMIT, 2, "Tenant acme", "delete one first"), 409,
     "[('clusters', 'limit 2 reached'), ('form', 'Tenant acme has 2 clusters, the limit "
     "(PORTAL_TENANT_MAX_CLUSTERS) is 2: delete one first')]"),
])
def test_a_refusal_shows_the_form_again_at_its_status(error: Exception, status: int,
                                                      body: str) -> None:
    response = refused_with(error)
    assert (response.status_code, bytes(response.body).decode()) == (status, body)


def test_an_action_that_is_not_refused_answers_itself() -> None:
    answer = Response("saved", status_code=303)
    assert submitted(lambda: answer, lambda refusal: shown({}, 500)) is answer


def test_any_other_error_is_not_a_refusal() -> None:
    def action() -> Response:
        raise KeyError("gpus")

    with pytest.raises(KeyError):
        submitted(action, lambda refusal: shown({}, 500))


def request_of(headers: dict[str, str]) -> Request:
    return Request({"type": "http", "method": "POST", "path": "/", "query_string": b"",
                    "headers": [(k.encode(), v.encode()) for k, v in headers.items()]})


def in_a_row(refusal: Refusal) -> Response:
    return Response(refusal.detail, status_code=refusal.status)


def test_a_row_shows_its_refusal_over_htmx() -> None:
    def action() -> Response:
        raise Conflict("decided by someone else meanwhile")

    response = submitted(action, in_row(request_of({"hx-request": "true"}), in_a_row))
    assert (response.status_code, response.body) == (409, b"decided by someone else meanwhile")


def test_a_plain_post_of_a_row_answers_the_problem_page() -> None:
    def action() -> Response:
        Size.model_validate({"gpus": "many"})
        return Response("saved")

    with pytest.raises(ValidationFailed) as problem:
        submitted(action, in_row(request_of({}), in_a_row))
    assert problem.value.status == 422 and "gpus" in problem.value.detail
