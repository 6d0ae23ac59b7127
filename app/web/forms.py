"""Helpers for HTML forms: typed payloads from form fields, field errors, htmx-aware replies.

Form fields arrive as strings, while the API schemas take strict integers (so that JSON
``1.5`` or ``"3"`` is refused). ``form_payload`` turns digit-only fields into integers and
leaves anything else as text, so the same schema refuses it with the same message.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import Depends, Request
from pydantic import ValidationError
from starlette.responses import RedirectResponse, Response

from app.kit.errors import Conflict, ProblemError, ValidationFailed
from app.kit.validation_messages import in_our_words

_INTEGER = re.compile(r"^[+-]?\d{1,18}$")
_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
_TRUE = frozenset({"on", "true", "1", "yes"})

FieldErrors = dict[str, str]


async def form_fields(request: Request) -> dict[str, str]:
    form = await request.form()
    return {key: value for key, value in form.items() if isinstance(value, str)}


FormFields = Annotated[dict[str, str], Depends(form_fields)]


def form_payload(
    fields: dict[str, str],
    *,
    keys: Iterable[str],
    integers: Iterable[str] = (),
    booleans: Iterable[str] = (),
    dates: Iterable[str] = (),
) -> dict[str, Any]:
    """The fields named in ``keys``; empty optional fields are left out to take defaults."""
    integers, booleans, dates = set(integers), set(booleans), set(dates)
    payload: dict[str, Any] = {}
    for key in keys:
        if key in booleans:
            payload[key] = fields.get(key, "").lower() in _TRUE
            continue
        value = fields.get(key, "").strip()
        if value == "" and (key in integers or key in dates):
            continue
        if key in integers and _INTEGER.match(value):
            payload[key] = int(value)
        elif key in dates and _DATE.match(value):
            payload[key] = f"{value}T00:00:00Z"
        else:
            payload[key] = fields.get(key, "")
    return payload


def validation_errors(error: ValidationError) -> FieldErrors:
    """The schema's refusals in the portal's own words, one per field: every form shows
    these, never Pydantic's ("Input should be ...")."""
    errors: FieldErrors = {}
    for item in error.errors():
        field = ".".join(str(part) for part in item["loc"] if not isinstance(part, int))
        errors.setdefault(field or "form", in_our_words(item))
    return errors


def as_problem(error: ValidationError | ProblemError) -> ProblemError:
    """A schema error as the 422 problem the API would answer."""
    if isinstance(error, ProblemError):
        return error
    errors = validation_errors(error)
    detail = "; ".join(f"{field}: {message}" for field, message in errors.items())
    return ValidationFailed(detail, errors=[{"field": f, "message": m}
                                            for f, m in errors.items()])


def problem_errors(error: ProblemError) -> FieldErrors:
    errors = {str(item["field"]): str(item["message"]) for item in error.errors}
    errors["form"] = error.detail
    return errors


# What a form's action may be refused with, to show on the form: the schema's refusal, a
# service's, or a conflict with what is stored (a limit reached is one).
REFUSALS = (ValidationError, ValidationFailed, Conflict)


@dataclass(frozen=True)
class Refusal:
    """A form's action refused: the message per field (``form`` for the whole form), the
    status to answer, and the problem the API would answer."""

    errors: FieldErrors
    status: int
    problem: ProblemError

    @property
    def detail(self) -> str:
        return self.problem.detail

    @classmethod
    def of(cls, error: ValidationError | ProblemError,
           schema_errors: Callable[[ValidationError], FieldErrors]) -> Refusal:
        problem = as_problem(error)
        if isinstance(error, ValidationError):
            return cls(schema_errors(error), problem.status, problem)
        return cls(problem_errors(error), error.status, problem)


def submitted(action: Callable[[], Response], refused: Callable[[Refusal], Response], *,
              schema_errors: Callable[[ValidationError], FieldErrors] = validation_errors,
              ) -> Response:
    """The one way an HTML form answers a refusal: ``action`` does the work and answers; a
    validation failure or a conflict goes to ``refused``, which shows the form again with
    the errors and what was typed, answering ``refusal.status``. ``schema_errors`` names a
    schema's errors after the form's fields where the two differ."""
    try:
        return action()
    except REFUSALS as error:
        return refused(Refusal.of(error, schema_errors))


def in_row(request: Request, row: Callable[[Refusal], Response]) -> Callable[[Refusal], Response]:
    """A refusal shown in the table row an htmx form swaps; a plain form post has no row to
    show it in, so it answers the problem's own page."""

    def refused(refusal: Refusal) -> Response:
        if not is_htmx(request):
            raise refusal.problem
        return row(refusal)

    return refused


def said_once(errors: FieldErrors) -> FieldErrors:
    """The errors without the whole form's when a field says the same beside it."""
    beside_fields = {message for field, message in errors.items() if field != "form"}
    if errors.get("form") in beside_fields:
        return {field: message for field, message in errors.items() if field != "form"}
    return errors


def only_touched(request: Request, fields: dict[str, str], errors: FieldErrors) -> FieldErrors:
    """While a form is being filled in (inline validation), the errors of the fields touched
    so far: the one that changed, which htmx names, and those holding something."""
    touched = {request.headers.get("hx-trigger-name", "")} | {k for k, v in fields.items() if v}
    return {field: message for field, message in errors.items() if field in touched}


def is_htmx(request: Request) -> bool:
    return request.headers.get("hx-request") == "true"


def go_to(request: Request, url: str, toast: str | None = None, *,
          focus: str | None = None) -> Response:
    """A full navigation, so that the address is the page shown: ``HX-Redirect`` for htmx, a
    303 for a plain form post. The toast is shown on the page navigated to (htmx only);
    ``focus`` (an element's id) is where focus lands there: the form's result, rather than
    the top of the page."""
    if is_htmx(request):
        response = Response(status_code=200, headers={"HX-Redirect": url})
        events: dict[str, Any] = {}
        if toast:
            events["toast-next"] = {"message": toast}
        if focus:
            events["focus-next"] = {"element": f"#{focus}"}  # htmx reads "target" itself
        if events:
            response.headers["HX-Trigger"] = json.dumps(events)
        return response
    return RedirectResponse(f"{url}#{focus}" if focus else url, status_code=303)


def with_toast(response: Response, message: str, *, after_navigation: bool = False) -> Response:
    """The result told in the page's toast region (role=status), via htmx's ``HX-Trigger``."""
    event = "toast-next" if after_navigation else "toast"
    response.headers["HX-Trigger"] = json.dumps({event: {"message": message}})
    return response


def check_typed_name(fields: dict[str, str], expected: str) -> None:
    """Destructive forms ask for the subject's name typed out: a mismatch changes nothing."""
    if fields.get("confirm_name", "").strip() != expected:
        message = f"type the name {expected!r} exactly to confirm; nothing was changed"
        raise ValidationFailed(message, errors=[{"field": "confirm_name", "message": message}])
