"""A route's request solved from a plan made once, instead of by FastAPI's dependency solver.

FastAPI solves an endpoint's dependencies on every request by walking their tree and asking of
each node, every time, whether it is overridden, which cache key and scopes it has and what kind
of callable it is: about a fifth of a signed-in list request's CPU. The answers never change, so
``_plan_for`` works them out when the route is built and ``direct_handler`` only runs the plan.
What the request sees is FastAPI's: the same order (the body read first, then each dependency
with its own parameters, then the endpoint's parameters and body), the same validation and its
errors (FastAPI's own functions), the same response serialisation, dependencies with ``yield``
on FastAPI's own exit stack. A route using what the plan does not cover (overrides, a
``Response`` or ``BackgroundTasks`` parameter, sync or scoped dependencies, forms, streams)
keeps FastAPI's handler (``direct_handler`` answers ``None``).
"""

from __future__ import annotations

import email.message
import inspect
import json
from collections.abc import Callable, Coroutine
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from typing import Any

from fastapi import params
from fastapi._compat import field_annotation_is_sequence
from fastapi.datastructures import DefaultPlaceholder
from fastapi.dependencies.models import Dependant
from fastapi.dependencies.utils import (
    _get_param_aliases,
    _get_param_model,
    _is_json_field,
    _validate_value_with_model_field,
    request_body_to_args,
    request_params_to_args,
)
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute, _effective_route_context_var, serialize_response
from fastapi.sse import EventSourceResponse
from fastapi.utils import is_body_allowed_for_status_code
from pydantic_core import PydanticUndefined
from starlette.datastructures import Headers, ImmutableMultiDict
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

Handler = Callable[[Request], Coroutine[Any, Any, Response]]
_UNDEFINED: Any = PydanticUndefined  # FastAPI's "no body"


@dataclass(frozen=True)
class _Param:
    """How one parameter is read, worked out once (FastAPI asks on every request)."""

    field: Any
    keys: tuple[str, ...]  # the request keys it may come under, preferred first
    where: str  # "query", "header", ...: its errors' location
    sequence: bool  # a list: an empty one is no value
    many: bool  # every value under its key (a list that is not JSON)


@dataclass(frozen=True)
class _Params:
    """A dependant's parameters of one kind; ``planned`` None when one of them is a model of
    parameters, which FastAPI's own function reads."""

    fields: list[Any]
    planned: tuple[_Param, ...] | None


def _params(fields: list[Any]) -> _Params:
    if any(_get_param_model(field) is not None for field in fields):
        return _Params(fields, None)
    planned = []
    for field in fields:
        sequence = field_annotation_is_sequence(field.field_info.annotation)
        planned.append(_Param(field, tuple(key for _, key in _get_param_aliases(field)),
                              field.field_info.in_.value, sequence,
                              sequence and not _is_json_field(field)))
    return _Params(fields, tuple(planned))


@dataclass(frozen=True)
class _Plan:
    """One dependant: its dependencies in order, then its own parameters."""

    call: Callable[..., Any]
    name: str | None
    generator: bool  # an async generator: entered on the function's exit stack
    use_cache: bool
    dependencies: tuple[_Plan, ...]
    path: _Params
    query: _Params
    headers: _Params
    cookies: _Params
    body: list[Any]
    request_names: tuple[str, ...]  # parameters taking the request (or its connection)


def _plan_for(endpoint: Dependant) -> _Plan | None:
    """The endpoint's plan; a generator endpoint streams, which FastAPI's handler does."""
    return None if inspect.isasyncgenfunction(endpoint.call) else _plan(endpoint)


def _plan(dependant: Dependant) -> _Plan | None:
    call = dependant.call
    if call is None or _unplannable(dependant):
        return None
    generator = inspect.isasyncgenfunction(call)
    if generator and dependant.scope != "function":
        return None  # exits after the response is sent: FastAPI's request stack
    if not generator and not _awaitable(call):
        return None  # sync: FastAPI runs it in a thread
    dependencies = [_plan(sub) for sub in dependant.dependencies]
    if any(sub is None for sub in dependencies):
        return None
    return _Plan(call=call, name=dependant.name, generator=generator,
                 use_cache=dependant.use_cache,
                 dependencies=tuple(sub for sub in dependencies if sub is not None),
                 path=_params(dependant.path_params), query=_params(dependant.query_params),
                 headers=_params(dependant.header_params),
                 cookies=_params(dependant.cookie_params), body=list(dependant.body_params),
                 request_names=tuple(name for name in (dependant.request_param_name,
                                                       dependant.http_connection_param_name)
                                     if name))


def _unplannable(dependant: Dependant) -> bool:
    return bool(dependant.websocket_param_name or dependant.response_param_name
                or dependant.background_tasks_param_name or dependant.security_scopes_param_name
                or dependant.own_oauth_scopes or dependant.parent_oauth_scopes
                or dependant.concurrency is not None)


def _awaitable(call: Callable[..., Any]) -> bool:
    if inspect.isroutine(call):
        return inspect.iscoroutinefunction(inspect.unwrap(call))
    return inspect.iscoroutinefunction(type(call).__call__)


def direct_handler(own: APIRoute) -> Handler | None:
    """The route's handler, or ``None`` when its plan cannot be made. A route of an included
    router is built from FastAPI's effective context (the router's dependencies and responses
    added), found as FastAPI's own ``get_route_handler`` finds it."""
    context = _effective_route_context_var.get()
    route: Any = context if context is not None and context.original_route is own else own
    if getattr(route.dependency_overrides_provider, "dependency_overrides", None):
        return None
    if route.stream_item_field or route.is_json_stream:
        return None
    if route.body_field is not None and isinstance(route.body_field.field_info, params.Form):
        return None
    plan = _plan_for(route.dependant)
    if plan is None:
        return None
    response_class = _value(route.response_class)
    if issubclass(response_class, EventSourceResponse):
        return None
    endpoint = plan.call
    json_fast = route.response_field is not None and isinstance(route.response_class,
                                                                DefaultPlaceholder)
    reads_body = route.body_field is not None
    strict = _value(route.strict_content_type)
    embed = route._embed_body_fields

    async def handler(request: Request) -> Response:
        body = await _read_body(request, strict) if reads_body else _UNDEFINED
        stack: AsyncExitStack = request.scope["fastapi_function_astack"]
        errors: list[Any] = []
        values = await _solve(plan, request, body, embed, stack, errors, {})
        if errors:
            raise RequestValidationError(errors, body=None if body is _UNDEFINED else body)
        raw = await endpoint(**values)
        if isinstance(raw, Response):
            return raw
        content = await serialize_response(
            field=route.response_field, response_content=raw,
            include=route.response_model_include, exclude=route.response_model_exclude,
            by_alias=route.response_model_by_alias,
            exclude_unset=route.response_model_exclude_unset,
            exclude_defaults=route.response_model_exclude_defaults,
            exclude_none=route.response_model_exclude_none, is_coroutine=True,
            dump_json=json_fast)
        response = (Response(content, media_type="application/json") if json_fast
                    else response_class(content))
        if route.status_code is not None:
            response.status_code = route.status_code
        if not is_body_allowed_for_status_code(response.status_code):
            response.body = b""
        return response

    return handler


def _value(setting: Any) -> Any:
    return setting.value if isinstance(setting, DefaultPlaceholder) else setting


async def _solve(plan: _Plan, request: Request, body: Any, embed: bool, stack: AsyncExitStack,
                 errors: list[Any], cache: dict[Any, Any]) -> dict[str, Any]:
    """The plan's arguments, as FastAPI's ``solve_dependencies`` finds them."""
    values: dict[str, Any] = {}
    for sub in plan.dependencies:
        sub_errors: list[Any] = []
        arguments = await _solve(sub, request, body, embed, stack, sub_errors, cache)
        if sub_errors:
            errors.extend(sub_errors)
            continue
        if sub.use_cache and sub.call in cache:
            solved = cache[sub.call]
        elif sub.generator:
            opened: AbstractAsyncContextManager[Any] = asynccontextmanager(sub.call)(**arguments)
            solved = await stack.enter_async_context(opened)
        else:
            solved = await sub.call(**arguments)
        if sub.name is not None:
            values[sub.name] = solved
        cache.setdefault(sub.call, solved)
    if plan.path.fields:
        _take(plan.path, request.path_params, values, errors)
    if plan.query.fields:
        _take(plan.query, request.query_params, values, errors)
    if plan.headers.fields:
        _take(plan.headers, request.headers, values, errors)
    if plan.cookies.fields:
        _take(plan.cookies, request.cookies, values, errors)
    if plan.body:
        found, body_errors = await request_body_to_args(plan.body, body, embed)
        values.update(found)
        errors.extend(body_errors)
    for name in plan.request_names:
        values[name] = request
    return values


def _take(params: _Params, source: Any, values: dict[str, Any], errors: list[Any]) -> None:
    """``request_params_to_args``, from the plan: the same values and errors."""
    if params.planned is None:
        found, field_errors = request_params_to_args(params.fields, source)
        values.update(found)
        errors.extend(field_errors)
        return
    found = {}
    for param in params.planned:
        key = next((k for k in param.keys if k in source), param.keys[0])
        if param.many and isinstance(source, ImmutableMultiDict | Headers):
            value = source.getlist(key)
        else:
            value = source.get(key)
        if value is None or (param.sequence and len(value) == 0):
            value = _UNDEFINED  # the default, applied by the validation
        checked, field_errors = _validate_value_with_model_field(
            field=param.field, value=value, values=found, loc=(param.where, key))
        if field_errors:
            errors.extend(field_errors)
        else:
            found[param.field.name] = checked
    values.update(found)


async def _read_body(request: Request, strict_content_type: bool) -> Any:
    """The body as FastAPI's handler reads it: JSON when the content type says so (or, not
    strict, says nothing), else the bytes; nothing when empty."""
    try:
        raw = await request.body()
        if not raw:
            return _UNDEFINED
        content_type = request.headers.get("content-type")
        if not content_type:
            return raw if strict_content_type else await request.json()
        message = email.message.Message()
        message["content-type"] = content_type
        subtype = message.get_content_subtype()
        if message.get_content_maintype() == "application" and (
                subtype == "json" or subtype.endswith("+json")):
            return await request.json()
        return raw
    except json.JSONDecodeError as error:
        raise RequestValidationError(
            [{"type": "json_invalid", "loc": ("body", error.pos), "msg": "JSON decode error",
              "input": {}, "ctx": {"error": error.msg}}], body=error.doc) from error
    except HTTPException:
        raise
    except Exception as error:
        raise HTTPException(status_code=400,
                            detail="There was an error parsing the body") from error

