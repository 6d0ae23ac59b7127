"""The columns every grant of GPUs is counted in (``app.kit.gpu_units``), and the one rule the
database checks between them: on a row of whole GPUs, ``amount`` is ``gpus``.

Code that writes only ``gpus`` (every door that knew whole GPUs alone) keeps that so through
the ORM: a whole-GPU row's ``amount`` follows its ``gpus`` when it is added or changed without
an ``amount`` of its own. A plain INSERT statement gives ``amount`` itself (``amount_of``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlalchemy import String, event, inspect
from sqlalchemy.orm import Mapped, mapped_column

UNITS_CHECK = "unit IN ('gpu', 'mig', 'share')"
PROFILE_CHECK = "(unit = 'mig' AND mig_profile <> '') OR (unit <> 'mig' AND mig_profile = '')"
GPU_AMOUNT_CHECK = "unit <> 'gpu' OR amount = gpus"
WHOLE_ONLY_CHECK = "unit = 'gpu' OR gpus = 0"


def unit_column() -> Mapped[str]:
    return mapped_column(String(5), default="gpu", server_default="gpu")


def profile_column() -> Mapped[str]:
    return mapped_column(String(16), default="", server_default="")


def amount_of(values: Mapping[str, Any]) -> dict[str, Any]:
    """An INSERT's values with ``amount`` given: ``gpus`` on a whole-GPU row without one."""
    if values.get("amount") is not None or values.get("unit", "gpu") != "gpu":
        return dict(values)
    return {**values, "amount": values.get("gpus") or 0}


def amount_follows_gpus(model: type[Any]) -> type[Any]:
    """Class decorator: ``model``'s whole-GPU rows keep ``amount == gpus`` through the ORM."""

    @event.listens_for(model, "before_insert")
    def _on_insert(_mapper: Any, _connection: Any, target: Any) -> None:
        if target.amount is None and target.unit in (None, "gpu"):
            target.amount = target.gpus or 0

    @event.listens_for(model, "before_update")
    def _on_update(_mapper: Any, _connection: Any, target: Any) -> None:
        attributes = inspect(target).attrs
        if (target.unit == "gpu" and attributes.gpus.history.has_changes()
                and not attributes.amount.history.has_changes()):
            target.amount = target.gpus

    return model
