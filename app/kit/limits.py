"""What one tenant or user may hold at once: pending quota requests, clusters, API tokens.

Each domain counts its own rows under a lock of the owner's row (the tenant's, the user's;
``FOR NO KEY UPDATE``, which an insert naming the owner never waits for), so that two requests
at once cannot both take the last place; this module only says how a limit
reached is answered: a 409 naming the limit, its setting and the current count.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from app.kit.errors import Conflict


@dataclass(frozen=True)
class Limit:
    key: str  # as the API's limits answer names it
    what: str  # "pending quota requests", as a sentence names them
    setting: str  # the environment variable that sets it
    maximum: int

    def ensure_room(self, current: int, whose: str, advice: str) -> None:
        """Refuses one more when ``current`` (counted under the owner's lock) is at the limit."""
        if current >= self.maximum:
            raise LimitReached(self, current, whose, advice)


class LimitReached(Conflict):
    title = "Limit reached"

    def __init__(self, limit: Limit, current: int, whose: str, advice: str) -> None:
        super().__init__(
            f"{whose} has {current} {limit.what}, the limit ({limit.setting}) is "
            f"{limit.maximum}: {advice}",
            errors=[{"field": limit.key, "message": f"limit {limit.maximum} reached"}])
        self.limit = limit
        self.current = current

    def to_problem(self, instance: str, request_id: str) -> dict[str, Any]:
        return {**super().to_problem(instance, request_id), "limit": self.limit.key,
                "maximum": self.limit.maximum, "current": self.current}
