"""Routes whose sync endpoint, and the commit of its request's transaction, take one thread hop.

FastAPI runs a sync endpoint in a worker thread, then validates its result in another, and a
sync yield dependency's commit in a third. Each hop queues on the thread pool and contends for
the GIL with the others: at 32 clients, more time went to handing work between threads than to
SQL. Here the endpoint is wrapped in an async one that runs the body and the commit together in
one worker thread; FastAPI then validates the result on the event loop.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Coroutine, Hashable
from typing import Any

from fastapi import Request
from fastapi.routing import APIRoute
from sqlalchemy.orm import Session
from starlette.responses import Response

from app.database.core import ReadOnlySession, writes_pending
from app.http import hop
from app.http.direct import direct_handler
from app.http.middleware import REFUSED_TEXT
from app.kit.errors import ProblemError

_REQUEST = "unit_of_work_request_"


class UnitOfWorkRoute(APIRoute):
    def __init__(self, path: str, endpoint: Callable[..., Any], **kwargs: Any) -> None:
        if not inspect.iscoroutinefunction(endpoint):
            endpoint = in_one_hop(endpoint)
        super().__init__(path, endpoint, **kwargs)

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        """The route's own plan (``app.http.direct``) where it can have one, else FastAPI's."""
        return direct_handler(self) or super().get_route_handler()


def in_one_hop(function: Callable[..., Any]) -> Callable[..., Any]:
    signature = inspect.signature(function, eval_str=True)
    request_parameter = next((name for name, parameter in signature.parameters.items()
                              if parameter.annotation is Request), None)

    async def endpoint(**arguments: Any) -> Any:
        request: Request = arguments[request_parameter or _REQUEST]
        if request_parameter is None:
            del arguments[_REQUEST]
        session: Session | None = getattr(request.state, "db", None)
        refused: ProblemError | None = getattr(request.state, REFUSED_TEXT, None)
        return await hop.run_as(_share_of(request), _run_and_commit, function, arguments,
                                session, refused)

    parameters = list(signature.parameters.values())
    if request_parameter is None:
        parameters.append(inspect.Parameter(_REQUEST, inspect.Parameter.KEYWORD_ONLY,
                                            annotation=Request))
    endpoint.__signature__ = signature.replace(parameters=parameters)  # type: ignore[attr-defined]
    for attribute in ("__name__", "__qualname__", "__doc__", "__module__"):
        setattr(endpoint, attribute, getattr(function, attribute))
    return endpoint


def _share_of(request: Request) -> Hashable | None:
    """Whose threads a write counts against: its tenant's, else its caller's. Writes may wait
    for rows (up to the lock timeout); one tenant's burst of them must leave others a thread."""
    if request.scope.get("method", "GET") in ("GET", "HEAD"):
        return None
    tenant = request.scope.get("path_params", {}).get("tenant")
    if tenant is not None:
        return ("tenant", tenant)
    actor: tuple[int, str] | None = getattr(request.state, "actor", None)
    return ("user", actor[0]) if actor is not None else None


def _run_and_commit(function: Callable[..., Any], arguments: dict[str, Any],
                    session: Session | None, refused: ProblemError | None = None) -> Any:
    """The request's session, if any, commits here, or on an error rolls back here: its
    transaction ends, and its connection goes back to the pool, before the thread is free.

    Its row locks with it: a request that locked a row and then answered 409 once left its
    rollback to the dependency, a second hop queued behind the requests waiting for that lock,
    each holding one of the process's threads: nobody answered again (issue 53). Its
    connection with it: held until the event loop came back to close the session, while the
    thread took the next request, a busy process had more connections out than threads (34 new
    PostgreSQL connections a second at 32 clients on one list). A read session's commit is no
    round trip (autocommit on PostgreSQL).
    """
    try:
        result = _run(function, arguments, refused)
        if session is not None and session.in_transaction() and _may_commit(session):
            session.commit()
    except BaseException:
        if session is not None and session.in_transaction():
            session.rollback()
        raise
    return result


def _run(function: Callable[..., Any], arguments: dict[str, Any],
         refused: ProblemError | None) -> Any:
    """A form that held text the database cannot store (``refused``) must come back as the
    form's 422; any other answer is undone and the refusal raised in its place."""
    try:
        result = function(**arguments)
    except ProblemError:
        if refused is None:
            raise
        raise refused from None
    if refused is not None and getattr(result, "status_code", None) != 422:
        raise refused
    return result


def _may_commit(session: Session) -> bool:
    """A read session keeps what a handler changed in memory (for a page, say) rather than
    have its commit refuse it; the dependency closes such a session later, as before."""
    return not isinstance(session, ReadOnlySession) or not writes_pending(session)
