"""Every ``String(n)`` column of the migrated database is at least as wide as what writes it.

A request's field the schema lets through but the column cannot hold is a 500 on PostgreSQL
(``StringDataRightTruncation``; SQLite stores it whole), as a 320-character email was while a
pending user's name, filled from it, was 200 wide. The widths are read from a database migrated
by Alembic, not from the models: the two can disagree.

The map from schema fields to columns is derived where a schema writes one table and the field
has the column's name (``WRITES``), and stated where not (``ALSO_WRITES``,
``NOT_IN_A_STRING_COLUMN``, ``NARROWED``); columns no schema field writes are named with what
writes them (``WRITTEN_BY_THE_SERVER``). A new schema field with a ``max_length`` or a new
``String(n)`` column that none of these covers fails here, so the map cannot rot. Labels the
server builds from names (audit targets and actors) are checked by driving the real create
paths with the longest names and emails the schemas allow.
"""

from __future__ import annotations

import importlib
import pkgutil
import types
import typing
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo
from sqlalchemy import String, inspect
from sqlalchemy.orm import Session

import app
from app.audit import readable
from app.audit.models import AuditEvent
from app.auth import service as auth_service
from app.auth.models import User
from app.auth.schemas import CliLoginRequest, TokenCreate
from app.clusters.schemas import ClusterCreate, SleepPolicyIn
from app.database.core import Database
from app.gpu_classes.schemas import GpuClassCreate, GpuClassUpdate
from app.hosts.schemas import HostCredentialsIn, HostRegister, HostUpdate, StateChange
from app.machines.schemas import BmcCredentialsIn, MachineRegister
from app.nodes.schemas import AssignmentIn, SuggestionIn
from app.notifications.endpoint_schemas import EndpointCreate, EndpointUpdate
from app.notifications.preference_schemas import PreferenceIn
from app.quotas.schemas import ApproveIn, QuotaRequestCreate, RejectIn
from app.templates.schemas import (
    AddonSpec,
    TemplateCreate,
    VersionEdit,
    VersionOut,
    VersionSettings,
)
from app.tenants.group_mappings import GroupMappingIn
from app.tenants.schemas import MemberCreate, TenantCreate, TenantUpdate
from tests.support.tenancy import build_tenancy, headers

Field = tuple[type[BaseModel], str]

# The table each schema writes: its fields write the columns of the same name there.
WRITES: dict[type[BaseModel], str] = {
    TokenCreate: "api_tokens",
    CliLoginRequest: "api_tokens",
    ClusterCreate: "virtual_clusters",
    SleepPolicyIn: "virtual_clusters",
    GpuClassCreate: "gpu_classes",
    GpuClassUpdate: "gpu_classes",
    HostRegister: "host_clusters",
    HostUpdate: "host_clusters",
    MachineRegister: "machines",
    QuotaRequestCreate: "quota_requests",
    TemplateCreate: "cluster_templates",
    VersionSettings: "cluster_template_versions",
    VersionEdit: "cluster_template_versions",
    TenantCreate: "tenants",
    TenantUpdate: "tenants",
    EndpointCreate: "webhook_endpoints",
    EndpointUpdate: "webhook_endpoints",
    PreferenceIn: "notification_preferences",
}
# Fields that write columns of another name, or more than one column.
ALSO_WRITES: dict[Field, tuple[str, ...]] = {
    # A user invited by email is named by the address until their first sign-in.
    (MemberCreate, "email"): ("users.email", "users.name"),
    (TenantCreate, "admin_email"): ("users.email", "users.name"),
    (GroupMappingIn, "group"): ("group_mappings.group_name",),
    (HostCredentialsIn, "server"): ("host_clusters.api_endpoint",),
    (ApproveIn, "note"): ("quota_requests.decision_note",),
    (RejectIn, "note"): ("quota_requests.decision_note",),
}
# Fields with a ``max_length`` that no String column holds, and why.
NOT_IN_A_STRING_COLUMN: dict[Field, str] = {
    (ClusterCreate, "region"): "picks a host cluster; the cluster keeps the host's id",
    (ClusterCreate, "template"): "picks a template; the cluster keeps the version's id",
    (HostCredentialsIn, "kubeconfig"): "sealed: stored encrypted, as bytes",
    (HostCredentialsIn, "token"): "sealed: stored encrypted, as bytes",
    (HostCredentialsIn, "ca_certificate"): "sealed: stored encrypted, as bytes",
    (StateChange, "reason"): "kept in the audit event's JSON",
    (MachineRegister, "host_cluster"): "looks a host cluster up",
    (MachineRegister, "gpu_class"): "looks a GPU class up",
    (BmcCredentialsIn, "username"): "sealed: stored encrypted, as bytes",
    (BmcCredentialsIn, "password"): "sealed: stored encrypted, as bytes",
    (AssignmentIn, "tenant"): "looks a tenant up",
    (SuggestionIn, "tenant"): "looks a tenant up",
    (SuggestionIn, "gpu_class"): "looks a GPU class up",
    (AddonSpec, "name"): "kept in the template version's add-ons JSON",
    (AddonSpec, "repo"): "kept in the template version's add-ons JSON",
    (AddonSpec, "chart"): "kept in the template version's add-ons JSON",
    (AddonSpec, "version"): "kept in the template version's add-ons JSON",
    (VersionOut, "kubernetes_version"): "an answer, never read from a request",
    (VersionOut, "sleep_schedule"): "an answer, never read from a request",
    (VersionOut, "sleep_timezone"): "an answer, never read from a request",
}
# Fields a validator holds below their ``max_length`` (which is there so that a long value gets
# the validator's own message): the longest value they take. Checked below, not trusted.
NARROWED: dict[Field, int] = {
    (TenantCreate, "slug"): 30,
    (HostRegister, "name"): 63,
    (HostRegister, "region"): 63,
    (HostUpdate, "name"): 63,
    (HostUpdate, "region"): 63,
    (MachineRegister, "name"): 63,
}
# A grant's unit and MIG profile (issue 61): one of app.kit.gpu_units.UNITS, and a profile of
# KAI's shape (parse_profile: at most 8 characters).
_UNIT = "a grant unit of app.kit.gpu_units (gpu, mig, share)"
_PROFILE = "a MIG profile app.kit.gpu_units.parse_profile accepts (8 characters at most)"
# String columns no schema field writes, and what writes them (width checked where it is built,
# or by the label test below).
WRITTEN_BY_THE_SERVER: dict[str, str] = {
    "alembic_version.version_num": "Alembic's revision ids",
    "api_tokens.token_hash": "a SHA-256 hex digest",
    "api_tokens.prefix": "the first characters of a generated secret",
    "audit_events.actor_label": "the principal's email (users.email, 320), or a fixed name",
    "audit_events.action": "fixed action names",
    "audit_events.target_type": "fixed kind names",
    "audit_events.target_id": "an id or a path, cut to 255 by audit.record",
    "audit_events.target_label": "built from names, cut to 300 by audit.record",
    "audit_events.request_id": "the request id, generated or checked by the logging middleware",
    "burst_policies.tier": "one of the policy's fixed tiers",
    "cluster_template_versions.state": "fixed states",
    "cluster_template_versions.placement": "a Literal of the schema",
    "cluster_template_versions.pod_security": "a Literal of the schema",
    "cluster_template_versions.idle_measure": "a Literal of the schema",
    "condition_transitions.type": "condition types the reconciler writes, cut to 200",
    "condition_transitions.status": "True, False or Unknown",
    "condition_transitions.reason": "condition reasons the reconciler writes, cut to 200",
    "gpu_reclaims.event_uid": "a Kubernetes object's uid",
    "gpu_reclaims.pod": "a Kubernetes object name (at most 253)",
    "gpu_reclaims.action": "fixed actions",
    "group_mappings.role": "a Literal of the schema",
    "host_clusters.credential_kind": "a Literal of the schema",
    "host_clusters.state": "fixed states",
    "idempotency_keys.principal": "'user:' and an id",
    "idempotency_keys.key": "the Idempotency-Key header, refused over 255 characters",
    "idempotency_keys.request_fingerprint": "a SHA-256 hex digest",
    "kubeconfig_grants.role": "a Literal of the schema",
    "kubeconfig_grants.service_account": "built from ids, a Kubernetes name",
    "kubeconfig_grants.secret_name": "built from ids, a Kubernetes name",
    "kubeconfig_grants.revoke_reason": "fixed reasons",
    "machines.desired": "fixed states",
    "machines.phase": "fixed phases",
    "machines.reason": "Metal3's errorMessage or a fixed text, cut to 1000",
    "machines.provisioning_state": "Metal3's provisioning state, cut to 40",
    "machines.node_name": "a Kubernetes node name (at most 253)",
    "machines.bootstrap_token_id": "a generated bootstrap token id (6 characters)",
    "memberships.role": "a Literal of the schema",
    "memberships.source": "fixed sources",
    "nodes.name": "a Kubernetes node name (at most 253)",
    "notification_deliveries.channel": "fixed channels",
    "notification_deliveries.destination": "'email:' or 'webhook:' and an id",
    "notification_deliveries.state": "fixed states",
    "notification_deliveries.last_error": "a delivery's error, cut to 300",
    "notifications.uid": "a generated uuid4 (36 characters)",
    "notifications.kind": "fixed kinds (app/notifications/kinds.py)",
    "notifications.subject_type": "fixed kind names (an audit event's target type)",
    "notifications.subject_id": "an audit event's target id, cut to 64",
    "notifications.dedupe_key": "built from a kind and ids",
    "nodes.mig_strategy": "fixed strategies",
    "nodes.zone": "a node label value (at most 63)",
    "nodes.rack": "a node label value (at most 63)",
    "nodes.clique": "a node label value (at most 63)",
    "quota_requests.state": "fixed states",
    "tenant_quotas.region": "an approved request's region (quota_requests.region, 63)",
    "tenants.state": "a Literal of the schema",
    "usage_hourly.source": "fixed sources",
    "usage_ledger.kind": "fixed kinds",
    "usage_ledger.cluster_name": "a cluster's name (virtual_clusters.name, 40)",
    "usage_ledger.placement": "a cluster's placement (virtual_clusters.placement, fixed values)",
    "usage_samples.source": "fixed sources",
    "quota_requests.unit": _UNIT,
    "tenant_quotas.unit": _UNIT,
    "tenant_quotas.mig_profile": _PROFILE,
    "virtual_clusters.unit": _UNIT,
    "quota_gpus_in_use.unit": _UNIT,
    "quota_gpus_in_use.mig_profile": _PROFILE,
    "usage_ledger.unit": _UNIT,
    "usage_ledger.mig_profile": _PROFILE,
    "usage_samples.unit": _UNIT,
    "usage_samples.mig_profile": _PROFILE,
    "usage_hourly.unit": _UNIT,
    "usage_hourly.mig_profile": _PROFILE,
    "users.issuer": "the configured IdP's issuer URL",
    "users.subject": "the IdP's subject: a longer one is a refused sign-in",
    "virtual_clusters.placement": "a Literal of the schema",
    "virtual_clusters.pod_security": "a template's Literal",
    "virtual_clusters.endpoint": "the operator's configured endpoint and a cluster's name",
    "virtual_clusters.power": "fixed states",
    "virtual_clusters.power_reason": "fixed reasons",
    "virtual_clusters.idle_measure": "a Literal of the schema",
    "web_sessions.id_hash": "a SHA-256 hex digest",
    # Until the endpoints' API (issue 60) writes them through its schema.
    "webhook_endpoints.format": "fixed formats",
    "webhook_endpoints.state": "fixed states",
    "webhook_endpoints.last_error": "a delivery's error, cut to 300",
    "work_items.kind": "fixed kinds of work",
    "work_items.key": "ids, 'all', or a notification's destination (40)",
    "work_items.lease_owner": "the worker's identity, cut to 100, and a random suffix",
}


def _all_schemas() -> list[type[BaseModel]]:
    for module in pkgutil.walk_packages(app.__path__, "app."):
        importlib.import_module(module.name)
    found: list[type[BaseModel]] = []
    pending = list(BaseModel.__subclasses__())
    while pending:
        schema = pending.pop()
        pending.extend(schema.__subclasses__())
        if schema.__module__.startswith("app.") and schema not in found:
            found.append(schema)
    return found


def _holds_text(annotation: object) -> bool:
    if annotation is str:
        return True
    arguments = typing.get_args(annotation)
    if typing.get_origin(annotation) is typing.Annotated:
        return _holds_text(arguments[0])
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return any(_holds_text(a) for a in arguments if a is not type(None))
    return False


def _max_length(field: FieldInfo) -> int | None:
    lengths = [m.max_length for m in field.metadata if getattr(m, "max_length", None)]
    return min(lengths) if lengths else None


def _text_fields() -> Iterator[tuple[Field, int | None]]:
    """Every text field of every schema, with its ``max_length`` (None: any length)."""
    for schema in _all_schemas():
        for name, field in schema.model_fields.items():
            if _holds_text(field.annotation):
                yield (schema, name), _max_length(field)


def _limited_text_fields() -> Iterator[tuple[Field, int]]:
    for field, limit in _text_fields():
        if limit is not None:
            yield field, limit


@pytest.fixture(scope="module")
def widths(pg_engine_database: Database) -> dict[str, int | None]:
    """Each column of the migrated database as ``table.column``: its width, None if unbounded
    text."""
    inspector = inspect(pg_engine_database.engine)
    found: dict[str, int | None] = {}
    for table in inspector.get_table_names():
        for column in inspector.get_columns(table):
            if isinstance(column["type"], String):
                found[f"{table}.{column['name']}"] = column["type"].length
    return found


def _written_columns(field: Field, widths: dict[str, int | None]) -> tuple[str, ...]:
    schema, name = field
    if field in ALSO_WRITES:
        return ALSO_WRITES[field]
    table = next((t for s, t in WRITES.items() if s is schema), None)
    if table is not None and f"{table}.{name}" in widths:
        return (f"{table}.{name}",)
    return ()


def test_every_limited_text_field_is_mapped_to_the_columns_it_writes(
    widths: dict[str, int | None],
) -> None:
    unmapped = [_named(field) for field, _ in _limited_text_fields()
                if not _written_columns(field, widths) and field not in NOT_IN_A_STRING_COLUMN]
    assert unmapped == [], "say which columns these write (or why none) in this test's maps"


def test_every_column_is_as_wide_as_the_longest_value_its_fields_take(
    widths: dict[str, int | None],
) -> None:
    too_narrow = []
    for field, limit in _text_fields():
        longest = NARROWED.get(field, limit)
        for column in _written_columns(field, widths):
            width = widths[column]
            if width is not None and (longest is None or width < longest):
                takes = "any length" if longest is None else longest
                too_narrow.append(f"{column} is {width} wide, {_named(field)} takes {takes}")
    assert too_narrow == []


def test_every_string_column_is_written_by_a_mapped_field_or_named_as_the_servers(
    widths: dict[str, int | None],
) -> None:
    from_fields = {column for field, _ in _limited_text_fields()
                   for column in _written_columns(field, widths)}
    bounded = {column for column, width in widths.items() if width is not None}
    assert sorted(bounded - from_fields - set(WRITTEN_BY_THE_SERVER)) == []
    assert sorted(set(WRITTEN_BY_THE_SERVER) - bounded) == [], "no longer a String(n) column"
    assert sorted(set(WRITTEN_BY_THE_SERVER) & from_fields) == [], "a field writes it: unlist it"


def test_the_maps_name_only_fields_and_columns_that_exist(widths: dict[str, int | None]) -> None:
    limited = dict(_limited_text_fields())
    stated: list[Field] = [*ALSO_WRITES, *NOT_IN_A_STRING_COLUMN, *NARROWED]
    assert [_named(field) for field in stated if field not in limited] == []
    assert sorted(c for cs in ALSO_WRITES.values() for c in cs if c not in widths) == []


def _named(field: Field) -> str:
    return f"{field[0].__name__}.{field[1]}"


@pytest.mark.parametrize(("field", "longest"), NARROWED.items(),
                         ids=[_named(field) for field in NARROWED])
def test_a_narrowed_field_takes_its_longest_value_and_refuses_one_more(
    field: Field, longest: int
) -> None:
    schema, name = field
    assert name not in _field_errors(schema, name, "a" * longest)
    assert name in _field_errors(schema, name, "a" * (longest + 1))


def _field_errors(schema: type[BaseModel], name: str, value: str) -> set[str]:
    """The fields refused when ``name`` is ``value`` (other fields may be missing)."""
    try:
        schema.model_validate({name: value})
    except ValidationError as error:
        return {str(e["loc"][0]) for e in error.errors() if e["loc"]}
    return set()


# ----- labels the server builds from names, through the real create paths on PostgreSQL

LONGEST_EMAIL = "e" * 308 + "@example.com"


def test_the_longest_names_and_emails_go_through_every_create_that_labels_them(
    client: TestClient, db: Session
) -> None:
    t = build_tenancy(db)
    admin = headers(db, t.platform_admin)
    slug, member = "w" * 30, "m" + LONGEST_EMAIL[1:]
    made = client.post("/api/v1/tenants", headers=admin, json={
        "slug": slug, "display_name": "D" * 100, "admin_email": LONGEST_EMAIL})
    assert made.status_code == 201, made.text
    # The tenant's first admin acts with the longest address as the actor's label.
    first_admin = db.query(User).filter(User.email == LONGEST_EMAIL).one()
    as_first_admin = headers(db, first_admin)
    for path, body, auth in (
        (f"/api/v1/tenants/{slug}/members", {"email": member}, as_first_admin),
        ("/api/v1/gpu-classes", {"product": "P" * 63, "display_name": "G" * 100}, admin),
        (f"/api/v1/tenants/{slug}/group-mappings", {"group": "g" * 255, "role": "viewer"},
         admin),
        ("/api/v1/tokens", {"name": "T" * 100, "scopes": ["read"]}, as_first_admin),
        (f"/api/v1/tenants/{slug}/clusters", {"name": "k" * 40}, as_first_admin),
        ("/api/v1/cluster-templates", {"name": "c" * 40, "description": "d" * 500}, admin),
    ):
        answer = client.post(path, headers=auth, json=body)
        assert answer.status_code == 201, (path, answer.text[:300])
    added = db.query(AuditEvent).filter(AuditEvent.action == "membership.create",
                                        AuditEvent.actor_label == LONGEST_EMAIL).one()
    assert added.target_label == readable.member_label(member, slug)[:300]


def test_a_sign_in_with_the_longest_email_and_an_overlong_name_is_recorded(db: Session) -> None:
    claims = {"sub": "s" * 255, "email": LONGEST_EMAIL, "name": "N" * 1000}
    identity = auth_service.identity_from_claims("https://idp.example", claims, "groups")
    user = auth_service.sign_in(db, identity, "platform-admins")
    db.flush()
    assert (user.email, user.name) == (LONGEST_EMAIL, "N" * 320)
    event = db.query(AuditEvent).filter(AuditEvent.action == "auth.sign_in",
                                        AuditEvent.actor_id == user.id).one()
    assert event.actor_label == LONGEST_EMAIL
