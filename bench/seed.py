"""A PostgreSQL database seeded like a large GPU cloud, in bulk (COPY and generate_series).

The fleet is generated once into a template database, migrated with the project's own
migrations; each run clones it (``CREATE DATABASE ... TEMPLATE``, a file copy), so that every
run starts from the same rows. The template is re-seeded when its fingerprint (the sizes, this
file and the migrations) changes.

Shapes: 1,000 tenants with an admin, a member and a viewer each, plus consultants in several
tenants; 20,000 nodes built from the reference host NodeList (H100, GB200 in NVLink cliques,
L40S, A100 in MIG mixed mode) in racks over three zones, some NotReady, a few gone; quotas of one
or two GPU classes per tenant with their approved requests, pending and decided ones; a third of
the tenants with dedicated nodes (and some ended assignments); 10,000 virtual clusters spread
unevenly, mostly Ready, some provisioning, failed or being deleted, with the conditions the
reconciler writes; one API token per user; 200,000 audit events over a year.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql
from sqlalchemy.engine import URL, make_url

from app.clusters import conditions as cond
from app.database import migrate
from app.kit.config import Settings
from app.nodes.inventory import NodeFacts, display_name, read_node

ROOT = Path(__file__).resolve().parents[1]
HOST_NODES = ROOT.parent / "shared" / "reference" / "host-nodes.json"
DEFAULTS = Settings.model_fields
RACK_LABEL: str = DEFAULTS["rack_label"].default
VERSIONS: list[str] = DEFAULTS["kubernetes_versions"].default
ENDPOINT: str = DEFAULTS["cluster_endpoint_template"].default
PLATFORM_ADMINS = 3
ADMIN_EMAIL = "admin@bench.example.com"
BENCH_TENANTS = 64
# Quota on top of what the seeded clusters hold, so that the write steps are accepted.
BENCH_HEADROOM_GPUS = 4096
BENCH_CLASS = "NVIDIA-H100-80GB-HBM3"
REGION = "eu-central"  # the one host's; quotas and requests are per region
ZONES = ("eu-central-a", "eu-central-b", "eu-central-c")
ROLES = ("admin", "member", "viewer")


@dataclass(frozen=True)
class Fleet:
    tenants: int = 1000
    clusters: int = 10_000
    nodes: int = 20_000
    audit_events: int = 200_000
    consultants: int = 100

    @classmethod
    def scaled(cls, factor: float) -> Fleet:
        full = cls()
        return cls(**{f.name: max(8, round(getattr(full, f.name) * factor)) for f in fields(cls)})

    def active_tenant(self, number: int) -> bool:
        return number % 97 != 0

    def bench_tenants(self) -> list[int]:
        """Tenant numbers (= ids) the load steps use: active, spread over the whole range."""
        active = [n for n in range(1, self.tenants + 1) if self.active_tenant(n)]
        step = max(1, len(active) // BENCH_TENANTS)
        return active[::step][:BENCH_TENANTS]


@dataclass(frozen=True)
class NodeKind:
    template: str  # the node of the reference NodeList this kind copies
    prefix: str
    share: float
    rack_size: int


KINDS = (NodeKind("h100-r1-n1", "h100", 0.60, 16), NodeKind("gb200-c1-n1", "gb200", 0.18, 18),
         NodeKind("l40s-n1", "l40s", 0.18, 16), NodeKind("a100-mig-n1", "a100", 0.04, 8))
# A tenant's main class, by tenant number modulo 10 (index into KINDS).
MAIN_CLASS = (0, 0, 0, 0, 0, 0, 2, 2, 1, 3)
QUOTA_SIZES = (16, 32, 64, 128, 256, 512)


def user_id(tenant: int, role: str) -> int:
    return PLATFORM_ADMINS + 3 * (tenant - 1) + ROLES.index(role) + 1


def slug(tenant: int) -> str:
    return f"t{tenant:04d}"


# ----- the database


def psycopg_url(url: str, database: str | None = None) -> str:
    parsed: URL = make_url(url)
    if database is not None:
        parsed = parsed.set(database=database)
    return parsed.set(drivername="postgresql").render_as_string(hide_password=False)


def database_name(url: str) -> str:
    name = make_url(url).database
    if not name:
        raise SystemExit(f"the database URL names no database: {url}")
    return name


def fingerprint(fleet: Fleet) -> str:
    digest = hashlib.sha256(json.dumps(fleet.__dict__, sort_keys=True).encode())
    for path in [Path(__file__), *sorted((ROOT / "migrations" / "versions").glob("*.py"))]:
        digest.update(path.read_bytes())
    return "bench-seed " + digest.hexdigest()[:16]


def _admin(url: str) -> psycopg.Connection[Any]:
    return psycopg.connect(psycopg_url(url, "postgres"), autocommit=True)


def _comment(admin: psycopg.Connection[Any], name: str) -> str | None:
    row = admin.execute("SELECT shobj_description(oid, 'pg_database') FROM pg_database "
                        "WHERE datname = %s", (name,)).fetchone()
    return None if row is None else row[0] or ""


def _recreate(admin: psycopg.Connection[Any], name: str, template: str | None = None) -> None:
    admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
    create = sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name))
    if template:
        create = sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(
            sql.Identifier(name), sql.Identifier(template))
    admin.execute(create)


def prepare(url: str, fleet: Fleet, *, reseed: bool = False, log: Any = print) -> bool:
    """A fresh copy of the seeded fleet at ``url``; True when the template had to be seeded."""
    name = database_name(url)
    template = f"{name}_template"
    template_url = make_url(url).set(database=template).render_as_string(hide_password=False)
    mark = fingerprint(fleet)
    seeded = False
    with _admin(url) as admin:
        if reseed or _comment(admin, template) != mark:
            log(f"seeding {template} ({fleet}) ...")
            _recreate(admin, template)
            migrate.upgrade(template_url)
            seed(template_url, fleet)
            admin.execute(sql.SQL("COMMENT ON DATABASE {} IS {}").format(
                sql.Identifier(template), sql.Literal(mark)))
            seeded = True
        else:
            log(f"reusing {template} (fingerprint matches)")
        _recreate(admin, name, template)
    return seeded


def seed(url: str, fleet: Fleet, now: datetime | None = None) -> None:
    now = now or datetime.now(UTC)
    tables = generate(fleet, reference_nodes(), now)
    with psycopg.connect(psycopg_url(url)) as connection:
        for table, (columns, rows) in tables.items():
            _copy(connection, table, columns, rows)
        connection.execute(AUDIT_SQL, {"n": fleet.audit_events, "tenants": fleet.tenants,
                                       "now": now, "admins": PLATFORM_ADMINS})
        for table in [*tables, "audit_events"]:
            connection.execute(sql.SQL(
                "SELECT setval(pg_get_serial_sequence({t}, 'id'), "
                "(SELECT coalesce(max(id), 0) + 1 FROM {table}), false)").format(
                t=sql.Literal(table), table=sql.Identifier(table)))
    with psycopg.connect(psycopg_url(url), autocommit=True) as connection:
        connection.execute("VACUUM (ANALYZE)")


def _copy(connection: psycopg.Connection[Any], table: str, columns: Sequence[str],
          rows: Iterable[Sequence[Any]]) -> None:
    statement = sql.SQL("COPY {} ({}) FROM STDIN").format(
        sql.Identifier(table), sql.SQL(", ").join(map(sql.Identifier, columns)))
    with connection.cursor().copy(statement) as copy:
        for row in rows:
            copy.write_row([json.dumps(v) if isinstance(v, dict | list) else v for v in row])


def reference_nodes(path: Path = HOST_NODES) -> dict[str, NodeFacts]:
    if not path.exists():
        raise SystemExit(f"the reference NodeList is missing: {path}")
    manifests = json.loads(path.read_text())["items"]
    facts = (read_node(m, RACK_LABEL) for m in manifests)
    return {f.name: f for f in facts if f is not None}


# ----- the rows

AUDIT_SQL = """
INSERT INTO audit_events (occurred_at, actor_id, actor_label, tenant_id, action, target_type,
                          target_id, before, after, request_id)
SELECT %(now)s - (%(n)s - g) * interval '157 seconds', u.id, u.email, t.id, a.action,
       a.target_type, (g * 13 %% 100000)::text,
       CASE WHEN a.k %% 3 = 1 THEN json_build_object('gpus', g %% 64) END,
       json_build_object('gpus', g %% 64 + 1, 'reason', 'seeded for the benchmark'),
       substr(md5(g::text), 1, 16)
FROM generate_series(1, %(n)s) AS g
CROSS JOIN LATERAL (SELECT CASE WHEN g %% 10 = 0 THEN NULL
                                ELSE 1 + (g * 7919) %% %(tenants)s END AS id) AS t
JOIN users AS u ON u.id = coalesce(%(admins)s + 3 * (t.id - 1) + 1 + g %% 2, 1 + g %% 3)
JOIN (VALUES (0, 'virtual_cluster.create', 'virtual_cluster'),
             (1, 'virtual_cluster.resize', 'virtual_cluster'),
             (2, 'quota_request.create', 'quota_request'),
             (3, 'quota_request.approve', 'quota_request'),
             (4, 'kubeconfig.issue', 'kubeconfig_grant'),
             (5, 'membership.create', 'membership'),
             (6, 'node.assign', 'node'),
             (7, 'api_token.create', 'api_token')) AS a(k, action, target_type)
  ON a.k = g %% 8
"""

Rows = list[tuple[Any, ...]]


@dataclass
class _Tables:
    now: datetime
    rng: random.Random
    out: dict[str, tuple[tuple[str, ...], Rows]] = field(default_factory=dict)

    def add(self, table: str, columns: str, row: tuple[Any, ...]) -> None:
        names = tuple(c.strip() for c in columns.split(","))
        assert len(names) == len(row), table
        self.out.setdefault(table, (names, []))[1].append(row)

    def ago(self, days: float) -> datetime:
        return self.now - timedelta(days=days)


def generate(fleet: Fleet, reference: dict[str, NodeFacts], now: datetime,
             ) -> dict[str, tuple[tuple[str, ...], Rows]]:
    """Every table's rows, in foreign-key order (the audit trail is SQL: ``AUDIT_SQL``)."""
    t = _Tables(now, random.Random(11))
    t.add("host_clusters", "id, name, region, description, api_endpoint, credentials_encrypted, "
          "credential_kind, is_default, state, health_checks, created_at, updated_at",
          (1, "default", REGION, "", "", None, "env", True, "active", [], t.ago(400),
           t.ago(400)))
    kinds = [reference[k.template] for k in KINDS]
    for class_id, facts in enumerate(kinds, 1):
        t.add("gpu_classes", "id, product, display_name, memory_mib, gpus_per_node, "
              "declared_by_admin, created_at",
              (class_id, facts.product, display_name(facts.product), facts.memory_mib,
               facts.physical_gpus, False, t.ago(400)))
    _tenants_and_people(t, fleet)
    free = _nodes(t, fleet, kinds)
    quotas = _quotas(t, fleet, kinds, free)
    _clusters(t, fleet, quotas)
    return t.out


def _tenants_and_people(t: _Tables, fleet: Fleet) -> None:
    teams = ("Vision", "Speech", "Robotics", "LLM", "Search", "Ads", "Biology", "Climate")
    for n in range(1, PLATFORM_ADMINS + 1):
        email = ADMIN_EMAIL if n == 1 else f"ops{n}@bench.example.com"
        _user(t, n, email, f"Platform admin {n}", admin=True)
    for n in range(1, fleet.tenants + 1):
        state = "active" if fleet.active_tenant(n) else "suspended"
        t.add("tenants", "id, slug, display_name, state, created_at, updated_at",
              (n, slug(n), f"{teams[n % len(teams)]} team {n}", state, t.ago(365 - n % 300),
               t.ago(n % 30)))
        for role in ROLES:
            uid = user_id(n, role)
            _user(t, uid, f"{role}@{slug(n)}.example.com", f"{role.title()} of {slug(n)}")
            t.add("memberships", "tenant_id, user_id, role, source, created_at",
                  (n, uid, role, "direct", t.ago(300)))
        t.add("group_mappings", "tenant_id, group_name, role, created_at",
              (n, f"gpu-{slug(n)}-members", "member", t.ago(300)))
    first = user_id(fleet.tenants, "viewer") + 1
    for c in range(fleet.consultants):
        uid = first + c
        _user(t, uid, f"consultant{c}@partner.example.com", f"Consultant {c}")
        for k in range(10):
            tenant = 1 + (c * 37 + k * 101) % fleet.tenants
            t.add("memberships", "tenant_id, user_id, role, source, created_at",
                  (tenant, uid, "member", "group", t.ago(100)))


def _user(t: _Tables, uid: int, email: str, name: str, *, admin: bool = False) -> None:
    t.add("users", "id, issuer, subject, email, email_verified, name, is_platform_admin, "
          "admin_granted, groups, created_at, last_login_at",
          (uid, "https://idp.bench.invalid", f"sub-{uid}", email, True, name, admin, admin,
           ["platform-admins"] if admin else [], t.ago(360), t.ago(uid % 20)))
    secret = t.rng.randbytes(32).hex()
    t.add("api_tokens", "user_id, name, token_hash, prefix, scopes, created_at, expires_at, "
          "revoked_at, last_used_at",
          (uid, "ci", hashlib.sha256(secret.encode()).hexdigest(), "gtp_" + secret[:6],
           ["read", "write"], t.ago(20), t.ago(-30), None, t.ago(uid % 7)))


def _nodes(t: _Tables, fleet: Fleet, kinds: list[NodeFacts]) -> dict[int, list[int]]:
    """The inventory; returns each class's ready node ids, free for dedication."""
    free: dict[int, list[int]] = {}
    node_id = 0
    rack_no = 0
    for class_id, (kind, facts) in enumerate(zip(KINDS, kinds, strict=True), 1):
        count = max(1, round(fleet.nodes * kind.share))
        for index in range(count):
            if index % kind.rack_size == 0:
                rack_no += 1
            node_id += 1
            rack = f"rack-{rack_no:04d}"
            zone = ZONES[rack_no % len(ZONES)]
            name = f"{kind.prefix}-{rack_no:04d}-n{index % kind.rack_size + 1:02d}"
            clique = f"{hashlib.md5(rack.encode()).hexdigest()}.1" if facts.clique else ""  # noqa: S324 - a label, not security
            ready = node_id % 67 != 0
            gone = node_id % 211 == 0
            labels = {**facts.labels, "kubernetes.io/hostname": name,
                      "topology.kubernetes.io/zone": zone, RACK_LABEL: rack}
            if clique:
                labels["nvidia.com/gpu.clique"] = clique
            taints = [] if ready else [{"key": "node.kubernetes.io/unreachable",
                                        "effect": "NoSchedule"}]
            t.add("nodes", "id, host_cluster_id, name, gpu_class_id, gpu_count, mig_strategy, "
                  "mig_resources, zone, rack, clique, ready, taints, labels, first_seen_at, "
                  "last_seen_at, gone_at",
                  (node_id, 1, name, class_id, facts.gpus, facts.mig_strategy,
                   facts.mig_resources, zone, rack, clique, ready, taints, labels,
                   t.ago(300), t.ago(0.01), t.ago(3) if gone else None))
            if ready and not gone:
                free.setdefault(class_id, []).append(node_id)
    return free


@dataclass
class _Quota:
    gpus: int
    dedicated: int = 0


def _quotas(t: _Tables, fleet: Fleet, kinds: list[NodeFacts],
            free: dict[int, list[int]]) -> dict[int, dict[int, _Quota]]:
    """Quotas with their requests and dedicated nodes; tenant -> class -> quota for clusters."""
    bench = set(fleet.bench_tenants())
    bench_class = next(i for i, f in enumerate(kinds, 1) if f.product == BENCH_CLASS)
    quotas: dict[int, dict[int, _Quota]] = {}
    for n in range(1, fleet.tenants + 1):
        main = MAIN_CLASS[n % 10] + 1
        held = {main: _Quota(QUOTA_SIZES[n * 7 % len(QUOTA_SIZES)])}
        if n % 3 == 0:
            held[main % len(KINDS) + 1] = _Quota(16)
        quotas[n] = held
        if n % 3 == 1 and fleet.active_tenant(n) and kinds[main - 1].gpus:
            _dedicate(t, n, main, held[main], kinds[main - 1].gpus, free)
        if n % 7 == 2 and free.get(main):
            t.add("node_assignments", "node_id, tenant_id, assigned_by_id, created_at, ended_at, "
                  "ended_by_id", (free[main].pop(), n, 1, t.ago(200), t.ago(90), 1))
        extra = {bench_class: BENCH_HEADROOM_GPUS} if n in bench else {}
        for class_id, quota in held.items():
            gpus = quota.gpus + extra.pop(class_id, 0)
            _approved(t, n, class_id, gpus)
        for class_id, gpus in extra.items():
            _approved(t, n, class_id, gpus)
        _other_requests(t, n, main)
    return quotas


def _dedicate(t: _Tables, tenant: int, class_id: int, quota: _Quota, per_node: int,
              free: dict[int, list[int]]) -> None:
    pool = free.get(class_id, [])
    for _ in range(max(1, quota.gpus // per_node // 2)):
        if not pool:
            return
        t.add("node_assignments", "node_id, tenant_id, assigned_by_id, created_at, ended_at, "
              "ended_by_id", (pool.pop(0), tenant, 1, t.ago(60), None, None))
        quota.dedicated += per_node


def _approved(t: _Tables, tenant: int, class_id: int, gpus: int) -> None:
    t.add("tenant_quotas", "tenant_id, gpu_class_id, region, gpus, amount, cpu_millicores, "
          "memory_mib, updated_at", (tenant, class_id, REGION, gpus, gpus, gpus * 16_000,
                                     gpus * 131_072, t.ago(100)))
    _request(t, tenant, class_id, gpus, "approved", t.ago(101), approved=gpus)


def _other_requests(t: _Tables, tenant: int, class_id: int) -> None:
    for k in range(tenant % 4):
        _request(t, tenant, class_id, 8 * (k + 1), "pending", t.ago(k + 0.5))
    if tenant % 3 == 0:
        _request(t, tenant, class_id, 1024, "rejected", t.ago(40))
    if tenant % 5 == 0:
        _request(t, tenant, class_id, 64, "cancelled", t.ago(30))
    if tenant % 11 == 0:
        _request(t, tenant, class_id, 32, "expired", t.ago(200), approved=32,
                 ends_at=t.ago(20))


def _request(t: _Tables, tenant: int, class_id: int, gpus: int, state: str, at: datetime,
             approved: int | None = None, ends_at: datetime | None = None) -> None:
    decided = state not in ("pending", "cancelled")
    t.add("quota_requests", "tenant_id, gpu_class_id, region, gpus, amount, cpu_millicores, "
          "memory_mib, reason, ends_at, state, requested_by_id, created_at, approved_gpus, "
          "approved_amount, overcommitted, decided_by_id, decided_at, decision_note",
          (tenant, class_id, REGION, gpus, gpus, gpus * 16_000, gpus * 131_072,
           "Training runs for the next quarter", ends_at, state, user_id(tenant, "admin"), at,
           approved, approved, False, 1 if decided else None,
           at + timedelta(hours=3) if decided else None, "seeded"))


def _clusters(t: _Tables, fleet: Fleet, quotas: dict[int, dict[int, _Quota]]) -> None:
    for n, count in enumerate(cluster_counts(fleet), 1):
        left = {class_id: [q.gpus, q.dedicated] for class_id, q in quotas[n].items()}
        main = MAIN_CLASS[n % 10] + 1
        for j in range(count):
            class_id: int | None = None if j % 10 == 9 else main
            gpus = min((1, 2, 4, 8)[j % 4], left[main][0]) if class_id else 0
            dedicated = class_id is not None and j % 4 == 0 and 0 < gpus <= left[main][1]
            if class_id:
                left[main][0] -= gpus
                left[main][1] -= gpus if dedicated else 0
            _cluster(t, n, j, class_id, gpus, "dedicated-nodes" if dedicated else "shared-pool")


def cluster_counts(fleet: Fleet) -> list[int]:
    """Clusters per tenant: uneven (1 to 19), summing to the fleet's clusters."""
    base = 1 if fleet.clusters >= fleet.tenants else 0
    weights = [(n * 7919) % 19 for n in range(1, fleet.tenants + 1)]
    spread = fleet.clusters - base * fleet.tenants
    counts = [base + spread * w // sum(weights) for w in weights]
    for i in range(fleet.clusters - sum(counts)):
        counts[i % len(counts)] += 1
    return counts


def _cluster(t: _Tables, tenant: int, j: int, class_id: int | None, gpus: int,
             placement: str) -> None:
    name = f"{('train', 'infer', 'dev', 'eval', 'batch', 'notebook')[j % 6]}-{j:03d}"
    generation = 1 + j % 3
    state = ("deleting" if j % 33 == 5 else "failed" if j % 29 == 7
             else "provisioning" if j % 13 == 3 else "ready")
    created = t.ago(1 + (tenant * 31 + j * 7) % 300)
    t.add("virtual_clusters", "tenant_id, host_cluster_id, name, kubernetes_version, placement, "
          "gpu_class_id, gpus, amount, cpu_millicores, memory_mib, generation, "
          "observed_generation, "
          "conditions, endpoint, admin_kubeconfig_encrypted, over_quota, deletion_requested_at, "
          "created_by_id, created_at, updated_at, failed_attempts, template_version_id, "
          "user_namespaces, addons, "
          "placement_reason",
          (tenant, 1, name, VERSIONS[(tenant + j) % len(VERSIONS)], placement, class_id, gpus,
           gpus, (2000, 4000, 8000, 16000)[j % 4], (8192, 16384, 32768, 65536)[j % 4], generation,
           generation - 1 if state == "provisioning" else generation,
           _conditions(state, generation, created), ENDPOINT.format(cluster=name,
                                                                    tenant=slug(tenant)),
           None, False, t.ago(0.1) if state == "deleting" else None, user_id(tenant, "admin"),
           created, created + timedelta(hours=1), 3 if state == "failed" else 0,
           DEFAULT_TEMPLATE_VERSION, False, [], PLACEMENT_REASON))


PLACEMENT_REASON = f"the only host cluster, in {REGION}"
# Made by migration 0007 in the fresh database: the built-in "default" template's version 1.
DEFAULT_TEMPLATE_VERSION = 1


def _conditions(state: str, generation: int, at: datetime) -> list[dict[str, Any]]:
    done = cond.STEP_TYPES if state != "provisioning" else cond.STEP_TYPES[:3]
    found: list[dict[str, Any]] = []
    for type_ in done:
        found = cond.set_condition(found, type_, True, "Applied", "", generation, at)
    if state == "provisioning":
        return cond.set_condition(found, cond.READY, False, "Provisioning",
                                  "waiting for the release", generation, at)
    if state == "failed":
        found = cond.set_condition(found, cond.FAILED, True, "HelmFailed",
                                   "helm upgrade --install: timed out waiting for the condition",
                                   generation, at)
        return cond.set_condition(found, cond.READY, False, "Failed", "see Failed", generation, at)
    return cond.set_condition(found, cond.READY, True, "Ready", "the control plane answers",
                              generation, at)
