"""Quota in units (``app.kit.gpu_units``): what a request or an approval asks for, the refusals
in words that the API, the form and ``portalctl`` share, what the fleet can give (the form's
offers), and each unit's fields on the API.

A request asks for exactly one of ``gpus`` (whole GPUs), ``slices`` of a ``mig_profile``, or a
``gpu_share`` of one GPU. What the fleet does not have is refused before anything is written: whole
GPUs of a class whose nodes offer only MIG slices (the message names the slices to ask for
instead), a profile no live node of the class offers, a share of a class that is not shared (no
``share_step``) or has no whole GPU to share.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from decimal import Decimal
from typing import Any

from app.gpu_classes.models import GpuClass
from app.gpu_classes.schemas import Capacity, MigProfileFigures, NamedClass
from app.kit.errors import ValidationFailed
from app.kit.gpu_units import (
    SHARE,
    SHARE_STEPS,
    WHOLE_GPUS,
    GrantUnit,
    ProfileRefused,
    hundredths,
    parse_profile,
    share_text,
    steps,
    words,
)
from app.quotas.room import offer_value
from app.quotas.schemas import ApproveIn, QuotaRequestCreate

AMOUNT_FIELDS = {"gpu": "gpus", "mig": "slices", "share": "gpu_share"}
WHAT_IS_ASKED = {"gpu": "whole GPUs", "mig": "MIG slices", "share": "a share of one GPU"}


@dataclass(frozen=True)
class Ask:
    """A request's or an approval's amount, in its unit's steps (hundredths for a share)."""

    unit: GrantUnit
    amount: int

    @property
    def field(self) -> str:
        return AMOUNT_FIELDS[self.unit.kind]


def unit_of(row: Any) -> GrantUnit:
    """The unit of a row with ``unit`` and ``mig_profile`` columns."""
    return GrantUnit(row.unit, row.mig_profile or "")


def asked(payload: QuotaRequestCreate) -> Ask:
    """Exactly one of whole GPUs, slices of a profile, or a share; refused in words otherwise."""
    given = [name for name in AMOUNT_FIELDS.values() if getattr(payload, name) is not None]
    if len(given) != 1:
        message = ("give only one of gpus, slices (with mig_profile) and gpu_share"
                   if given else "give gpus, slices with mig_profile, or gpu_share")
        raise ValidationFailed.on_field(given[-1] if given else "gpus", message)
    if payload.mig_profile is not None and given != ["slices"]:
        raise ValidationFailed.on_field("mig_profile", "only MIG slices have a profile")
    if payload.slices is not None:
        if not payload.mig_profile:
            raise ValidationFailed.on_field(
                "mig_profile", "name the MIG profile of the slices, such as 1g.10gb")
        try:
            profile = parse_profile(payload.mig_profile)
        except ProfileRefused as refused:
            raise ValidationFailed.on_field("mig_profile", str(refused)) from None
        return Ask(GrantUnit("mig", profile), payload.slices)
    if payload.gpu_share is not None:
        return Ask(SHARE, share_hundredths(payload.gpu_share, "gpu_share"))
    assert payload.gpus is not None
    return Ask(WHOLE_GPUS, payload.gpus)


def share_hundredths(share: Decimal, field: str) -> int:
    if share > 1:
        raise ValidationFailed.on_field(field, "a share is at most one GPU; ask for whole GPUs")
    try:
        return hundredths(share)
    except ValueError as refused:
        raise ValidationFailed.on_field(field, str(refused)) from None


def _where(region: str) -> str:
    return f" in region {region}" if region else ""


def _offered_profiles(capacity: Capacity) -> list[MigProfileFigures]:
    return [row for row in capacity.mig_profiles if row.total > 0]


def profiles_in_words(capacity: Capacity) -> str:
    """ "1g.10gb (14 in the fleet), 3g.40gb (4) or 7g.80gb (2)"."""
    texts = [f"{row.profile} ({row.total}{' in the fleet' if not index else ''})"
             for index, row in enumerate(_offered_profiles(capacity))]
    if len(texts) < 2:
        return "".join(texts)
    return f"{', '.join(texts[:-1])} or {texts[-1]}"


def refuse_what_the_fleet_lacks(gpu_class: NamedClass, capacity: Capacity,
                                share_step: int | None, ask: Ask, region: str) -> None:
    """Refuses, in words, a request for what the class does not have in the region."""
    name, where = gpu_class.display_name, _where(region)
    if ask.unit.kind == "gpu":
        if capacity.total == 0 and capacity.mig_resources:
            offered = profiles_in_words(capacity)
            hint = (f"ask for slices of {offered}" if offered
                    else "none of a profile the portal offers")
            raise ValidationFailed.on_field(
                "gpus", f"{name} has no whole GPUs in the fleet{where}, only MIG slices: {hint}")
    elif ask.unit.kind == "mig":
        if not any(row.profile == ask.unit.profile for row in _offered_profiles(capacity)):
            offered = profiles_in_words(capacity)
            has = f"ask for slices of {offered}" if offered else "it has no MIG slices"
            raise ValidationFailed.on_field(
                "mig_profile", f"{name} has no {ask.unit.profile} slices in the fleet{where}: "
                               f"{has}")
    else:
        _refuse_share(name, where, capacity, share_step, ask.amount)


def _refuse_share(name: str, where: str, capacity: Capacity, share_step: int | None,
                  amount: int) -> None:
    if share_step is None:
        raise ValidationFailed.on_field(
            "gpu_share", f"{name} is not offered in shares of one GPU: ask for whole GPUs"
                         + (" or MIG slices" if capacity.mig_profiles else ""))
    if capacity.total == 0:
        raise ValidationFailed.on_field(
            "gpu_share", f"{name} has no whole GPUs in the fleet{where} to share")
    if amount % share_step:
        raise ValidationFailed.on_field("gpu_share", step_refusal(name, share_step))


def step_refusal(name: str, share_step: int) -> str:
    choices = ", ".join(share_text(n) for n in range(share_step, SHARE_STEPS + 1, share_step))
    return (f"a share of {name} is asked in steps of {share_text(share_step)} of a GPU: "
            f"one of {choices}")


def approved_amount(request: Any, payload: ApproveIn, share_step: int | None,
                    class_name: str) -> int:
    """What an approval grants, in the request's unit steps: the amount given in the field of
    the request's unit (``gpus``, ``slices`` or ``gpu_share``), or all that was asked."""
    unit = unit_of(request)
    field = AMOUNT_FIELDS[unit.kind]
    for other in AMOUNT_FIELDS.values():
        if other != field and getattr(payload, other) is not None:
            raise ValidationFailed.on_field(
                other, f"this request asks for {WHAT_IS_ASKED[unit.kind]}: approve {field}")
    value = getattr(payload, field)
    if value is None:
        return int(request.amount)
    granted = share_hundredths(value, field) if unit.kind == "share" else int(value)
    if granted > request.amount:
        most = (f"1 to {request.amount} GPUs" if unit.is_whole
                else f"at most {steps(unit, request.amount)}")
        raise ValidationFailed.on_field(field, f"approve {most}: at most what was requested")
    if unit.kind == "share" and share_step and granted % share_step:
        raise ValidationFailed.on_field(field, step_refusal(class_name, share_step))
    return granted


def overcommit_refusal(unit: GrantUnit, granted: int, class_name: str, capacity: Capacity,
                       free: int, region: str) -> str:
    """Why approving ``granted`` needs the explicit overcommit, in the unit's words."""
    where = _where(region)
    if unit.kind == "mig":
        row = next((p for p in capacity.mig_profiles if p.profile == unit.profile), None)
        guaranteed, ready = (row.guaranteed, row.ready) if row else (0, 0)
        figures = (f"{guaranteed + granted} of the {ready} ready {unit.profile} "
                   f"slices{where} ({max(free, 0)} free)")
    elif unit.kind == "share":
        figures = (f"more than the shares' room{where}: "
                   f"{share_text(max(free, 0))} of a GPU is free for shares")
    else:
        figures = (f"{capacity.guaranteed + granted} of the {capacity.ready} ready{where} "
                   f"({max(free, 0)} free)")
    what = (f"{granted} {class_name} GPUs" if unit.is_whole
            else words(unit, granted, class_name))
    return f"approving {what} would guarantee {figures}; confirm the overcommit to approve anyway"


def request_unit_fields(row: Any, class_name: str) -> dict[str, Any]:
    """``QuotaRequestOut``'s unit fields of a request row."""
    unit = unit_of(row)
    approved = row.approved_amount
    if approved is None and unit.is_whole:
        approved = row.approved_gpus
    return {"unit": unit.kind, "mig_profile": unit.profile, "amount": row.amount,
            "slices": row.amount if unit.kind == "mig" else None,
            "gpu_share": share_text(row.amount) if unit.kind == "share" else None,
            "grant": words(unit, row.amount, class_name),
            "approved_slices": approved if unit.kind == "mig" else None,
            "approved_gpu_share": (share_text(approved)
                                   if unit.kind == "share" and approved is not None else None),
            "approved_grant": None if approved is None else words(unit, approved, class_name)}


def unit_audit(row: Any) -> dict[str, Any]:
    """The unit of a request or quota row for its audit entries; nothing for whole GPUs, whose
    entries stay as they were."""
    unit = unit_of(row)
    if unit.is_whole:
        return {}
    return {"unit": unit.kind, "mig_profile": unit.profile, "amount": row.amount,
            **({"approved_amount": row.approved_amount}
               if hasattr(row, "approved_amount") else {})}


# ----- what the fleet can give: the request form's offers


@dataclass(frozen=True)
class Offer:
    """One thing a tenant may ask quota of: whole GPUs of a class, a share of one of its GPUs,
    or slices of one MIG profile of it."""

    gpu_class_id: int
    display_name: str
    product: str
    unit: GrantUnit
    share_step: int | None = None
    # The class's only offer (whole GPUs of a class neither shared nor sliced): its option is
    # the class's name alone, as before units.
    alone: bool = False

    @property
    def value(self) -> str:
        return offer_value(self.gpu_class_id, self.unit)

    @property
    def what(self) -> str:
        """ "whole GPUs", "a share of one GPU (steps of 0.25)", "1g.10gb slices"."""
        if self.unit.kind == "mig":
            return f"{self.unit.profile} slices"
        if self.unit.kind == "share":
            return f"a share of one GPU (steps of {share_text(self.share_step or 1)})"
        return "whole GPUs"

    @property
    def amount_label(self) -> str:
        """The amount field's label for this offer."""
        if self.unit.kind == "mig":
            return f"Slices of {self.unit.profile}"
        if self.unit.kind == "share":
            return f"Share of one GPU (steps of {share_text(self.share_step or 1)}, at most 1)"
        return "GPUs"

    @property
    def amount_step(self) -> str:
        return share_text(self.share_step or 1) if self.unit.kind == "share" else "1"


def offers_of(classes: Sequence[GpuClass], capacities: Mapping[int, Capacity]) -> list[Offer]:
    """Per class, what its fleet can give: whole GPUs unless its nodes offer only MIG slices;
    a share of one GPU when the class is shared and has whole GPUs; slices of each profile
    KAI Scheduler can count on its live nodes."""
    found: list[Offer] = []
    for row in classes:
        capacity = capacities.get(row.id)
        mig_only = capacity is not None and capacity.total == 0 and bool(capacity.mig_resources)
        offered: list[Offer] = []
        if not mig_only:
            offered.append(Offer(row.id, row.display_name, row.product, WHOLE_GPUS))
        if capacity is not None:
            if row.share_step is not None and capacity.total > 0:
                offered.append(Offer(row.id, row.display_name, row.product, SHARE,
                                     row.share_step))
            offered.extend(Offer(row.id, row.display_name, row.product,
                                 GrantUnit("mig", p.profile))
                           for p in _offered_profiles(capacity))
        if len(offered) == 1 and offered[0].unit.is_whole:
            offered = [replace(offered[0], alone=True)]
        found.extend(offered)
    return found
