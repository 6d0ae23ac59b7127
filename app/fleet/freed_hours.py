"""GPU-hours freed by sleep over the fleet, per GPU class and UTC day (today and the days
before), for platform admins: the usage report's ``slept_gpu_hours`` summed over tenants, so
the fleet and the tenants' reports give the same figures."""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy.orm import Session

from app.auth.principal import Principal
from app.authz import ensure_platform_admin
from app.fleet.schemas import ClassSleepOut, FleetSleepOut, SleptDayOut
from app.gpu_classes import service as gpu_classes
from app.usage import ledger
from app.usage import service as usage
from app.usage.schemas import UsageFilters, UsageRow

DEFAULT_DAYS = 8  # today and the seven days before
MAX_DAYS = 92


def freed_by_sleep(db: Session, principal: Principal, days: int = DEFAULT_DAYS) -> FleetSleepOut:
    ensure_platform_admin(principal)
    end = _end_of_today()
    start = end - timedelta(days=days)
    filters = UsageFilters(start=start, end=end, tenant=None, group_by="day")
    rows = usage.report(db, principal, filters).rows
    labels = [p.label for p in usage.periods(start, end, "day")]
    classes = [_class_out(gpu_class.product, gpu_class.display_name, rows, labels)
               for gpu_class in gpu_classes.all_classes(db)]
    return FleetSleepOut(start=start, end=end, days=labels, classes=classes)


def _end_of_today() -> datetime:
    return ledger.now_in_seconds().replace(hour=0, minute=0, second=0) + timedelta(days=1)


def _class_out(product: str, display_name: str, rows: list[UsageRow],
               labels: list[str]) -> ClassSleepOut:
    by_day = dict.fromkeys(labels, 0.0)
    for row in rows:
        if row.gpu_class == product:
            by_day[row.period] += row.slept_gpu_hours
    return ClassSleepOut(
        gpu_class=product, display_name=display_name,
        today_gpu_hours=round(by_day[labels[-1]], 6),
        total_gpu_hours=round(sum(by_day.values()), 6),
        days=[SleptDayOut(day=day, slept_gpu_hours=round(hours, 6))
              for day, hours in by_day.items()])
