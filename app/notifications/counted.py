"""Deliveries dropped at fan-out (their destination's queue full), counted in
``portal_notifications_total`` once the change that wrote them commits: a change rolled back
dropped nothing."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any

from sqlalchemy import event
from sqlalchemy.orm import Session

from app.kit import metrics

_DROPPED = "notifications.dropped"


def dropped(db: Session, channels: Iterable[str]) -> None:
    """One dropped delivery per channel named, counted when ``db`` commits."""
    named = Counter(channels)
    if named:
        db.info.setdefault(_DROPPED, Counter()).update(named)


@event.listens_for(Session, "after_commit")
def _count_committed(session: Session) -> None:
    for channel, amount in session.info.pop(_DROPPED, Counter()).items():
        metrics.count_notifications(channel, "dropped", amount)


@event.listens_for(Session, "after_soft_rollback")
def _forget_rolled_back(session: Session, previous: Any) -> None:
    if not previous.nested:
        session.info.pop(_DROPPED, None)
