"""Hooks let a lower domain announce a change that a higher domain must follow up on.

Domains point one way (tenants → quotas → nodes → clusters → kubeconfigs → …): a cascade
such as "a member removed → their kubeconfigs revoked" lives in the higher domain, which
connects to the lower domain's hook. Listeners run in the caller's transaction, so the
follow-up commits or rolls back with the change. A hook marked ``required`` refuses to fire
with no listener: a security cascade must never be skipped because a module was not imported.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, ParamSpec

P = ParamSpec("P")


class HookNotConnected(RuntimeError):
    pass


class Hook(Generic[P]):
    def __init__(self, name: str, *, required: bool = False) -> None:
        self.name = name
        self.required = required
        self._listeners: list[Callable[P, None]] = []

    def connect(self, listener: Callable[P, None]) -> Callable[P, None]:
        if listener not in self._listeners:
            self._listeners.append(listener)
        return listener

    def fire(self, *args: P.args, **kwargs: P.kwargs) -> None:
        if self.required and not self._listeners:
            raise HookNotConnected(f"nothing listens to {self.name}")
        for listener in self._listeners:
            listener(*args, **kwargs)
