"""A page's form that asks in any unit with one class select and one amount field, "gpus": the
select's options name the unit too (``room.offer_value``); the amount goes to the API's field of
that unit, and the API's refusals of those fields are shown on the two."""

from __future__ import annotations

from typing import Any

from app.kit.gpu_units import GrantUnit
from app.web.forms import FieldErrors

FORM_FIELD_OF = {"slices": "gpus", "gpu_share": "gpus", "mig_profile": "gpu_class_id"}


def in_unit(payload: dict[str, Any], unit: GrantUnit) -> dict[str, Any]:
    """The form's amount ("gpus") as the API's field of ``unit``."""
    if unit.is_whole or "gpus" not in payload:
        return payload
    rest = dict(payload)
    amount = rest.pop("gpus")
    if unit.kind == "mig":
        return {**rest, "slices": amount, "mig_profile": unit.profile}
    return {**rest, "gpu_share": str(amount)}


def on_the_form(errors: FieldErrors) -> FieldErrors:
    """The refusals of the API's unit fields on the form's fields that hold them."""
    shown: FieldErrors = {}
    for field, message in errors.items():
        shown.setdefault(FORM_FIELD_OF.get(field, field), message)
    return shown
