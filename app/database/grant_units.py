"""The columns every grant of GPUs is counted in (``app.kit.gpu_units``), and the one rule the
database checks between them: on a row of whole GPUs, ``amount`` is ``gpus``.

Code that writes only ``gpus`` (every door that knew whole GPUs alone) keeps that so through
the ORM: on a whole-GPU row, whichever of ``gpus`` and ``amount`` was set last is copied to the
other when the row is flushed. A plain INSERT statement gives ``amount`` itself
(``amount_of``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlalchemy import String, event
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


_LAST = "_whole_gpus_last_written"  # which of gpus and amount was set last, on an instance


def amount_follows_gpus(model: type[Any]) -> type[Any]:
    """Class decorator: ``model``'s whole-GPU rows keep ``amount == gpus`` through the ORM. Of
    the two, the one set last wins when the row is flushed (``gpus`` when neither was)."""

    def _written(name: str) -> Any:
        def remember(target: Any, value: Any, _old: Any, _initiator: Any) -> Any:
            setattr(target, _LAST, name)
            return value
        return remember

    for name in ("gpus", "amount"):
        event.listen(getattr(model, name), "set", _written(name), retval=True)

    def _follow(target: Any) -> None:
        if target.unit not in (None, "gpu"):
            return
        last = target.__dict__.pop(_LAST, None)
        if last == "amount" or (target.gpus is None and target.amount is not None):
            target.gpus = target.amount
        else:
            target.amount = target.gpus or 0
        target.__dict__.pop(_LAST, None)

    @event.listens_for(model, "before_insert")
    def _on_insert(_mapper: Any, _connection: Any, target: Any) -> None:
        _follow(target)

    @event.listens_for(model, "before_update")
    def _on_update(_mapper: Any, _connection: Any, target: Any) -> None:
        if _LAST in target.__dict__:
            _follow(target)

    return model
