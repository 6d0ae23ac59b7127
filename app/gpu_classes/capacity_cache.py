"""Recently summed GPU class capacity, for the pages that show it.

Summing a class's capacity reads every live node and dedicated assignment of the fleet (a few
milliseconds of database time at 20,000 nodes), too much for every view of the fleet, queue and
GPU class pages. Those pages show figures at most ``MAX_AGE_SECONDS`` old instead; decisions
(approvals, assignments) never read them: they sum afresh under their locks. A change made
through this process (quota, assignment, inventory sync) forgets the figures at once; one made
by another process shows within ``MAX_AGE_SECONDS``, well inside the inventory's own resync
period.

Figures are kept per database connection target (the engine in production, a test's own
connection in tests), weakly, with one entry per GPU class: bounded by the handful of classes.
When figures age out under load, one request sums them again while the others still show the
previous ones, instead of every request in flight summing at once.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable, Sequence
from typing import Any, TypeVar
from weakref import WeakKeyDictionary

from sqlalchemy.orm import Session

from app.gpu_classes.schemas import Capacity

MAX_AGE_SECONDS = 2.0

# Keyed by class id, or by (class id, region) for a class's figures in one region.
K = TypeVar("K", bound=Hashable)
Key = tuple[int, str | None]
_figures: WeakKeyDictionary[object, dict[Any, tuple[float, Capacity]]] = WeakKeyDictionary()
_summing = threading.Lock()


def recent(db: Session, gpu_class_ids: Sequence[K],
           compute: Callable[[Session, Sequence[K]], dict[K, Capacity]],
           clock: Callable[[], float] = time.monotonic) -> dict[K, Capacity]:
    """Each class's capacity as summed at most ``MAX_AGE_SECONDS`` ago, the rest summed now."""
    kept = _figures.setdefault(db.get_bind(), {})
    now = clock()
    found = {class_id: hit[1] for class_id in gpu_class_ids
             if (hit := kept.get(class_id)) is not None and now - hit[0] < MAX_AGE_SECONDS}
    missing = [class_id for class_id in gpu_class_ids if class_id not in found]
    if not missing:
        return found
    aged = {class_id: kept[class_id][1] for class_id in missing if class_id in kept}
    summing = _summing.acquire(blocking=False)
    if not summing and len(aged) == len(missing):
        return found | aged  # another request is summing them right now
    try:
        summed = compute(db, missing)
    finally:
        if summing:
            _summing.release()
    kept.update({class_id: (now, figures) for class_id, figures in summed.items()})
    return found | summed


def forget(db: Session) -> None:
    """After a change to quota, assignments or the inventory: the next view sums afresh."""
    _figures.pop(db.get_bind(), None)
