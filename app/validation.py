"""Input rules shared by every schema: no control characters, trimmed strings."""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator

_ANY_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
# Free text (reasons, notes) may span lines; other control characters are still refused.
_CONTROL_EXCEPT_NEWLINES = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")
_EMAIL = re.compile(r"^[^@\s]+@[^@\s]+\.[^@\s]+$")


def single_line(value: str) -> str:
    if _ANY_CONTROL.search(value):
        raise ValueError("must not contain control characters or line breaks")
    return value.strip()


def multi_line(value: str) -> str:
    if _CONTROL_EXCEPT_NEWLINES.search(value):
        raise ValueError("must not contain control characters")
    return value.strip()


def email_address(value: str) -> str:
    value = single_line(value)
    if not _EMAIL.match(value):
        raise ValueError("must be an email address such as alice@example.com")
    return value


SingleLine = Annotated[str, AfterValidator(single_line)]
MultiLine = Annotated[str, AfterValidator(multi_line)]
EmailAddress = Annotated[str, AfterValidator(email_address)]
