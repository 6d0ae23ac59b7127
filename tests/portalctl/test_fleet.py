"""`portalctl nodes` (platform admins) and `gpu-classes` against the real app."""

from __future__ import annotations

import json
from typing import Any

import httpx
from sqlalchemy import select, update

from app.nodes.models import Node
from tests.portalctl.conftest import Portal, PortalCtl, Result


def test_a_platform_admin_lists_nodes_with_filters(portal: Portal, portalctl: PortalCtl) -> None:
    first, second = _node_names(portal)[:2]
    with portal.database.transaction() as db:
        db.execute(update(Node).where(Node.name == first).values(ready=False, rack="r9"))
    portalctl.login(portal, "platform-admin")
    host = ("--host-cluster", portal.host_cluster)

    every = _json(portalctl("nodes", "list", *host, "-o", "json"))
    api = httpx.get(f"{portal.url}/api/v1/nodes", params={"host_cluster": portal.host_cluster},
                    headers={"Authorization": f"Bearer {portal.tokens['platform-admin']}"})
    assert every == api.json()["items"] and len(every) == 8
    not_ready = _json(portalctl("nodes", "list", *host, "--not-ready", "-o", "json"))
    assert [n["name"] for n in not_ready] == [first]
    ready = _json(portalctl("nodes", "list", *host, "--ready", "-o", "json"))
    assert first not in {n["name"] for n in ready} and len(ready) == 7
    in_rack = _json(portalctl("nodes", "list", *host, "--rack", "r9", "-o", "json"))
    assert [n["name"] for n in in_rack] == [first]
    by_class = portalctl("nodes", "list", *host, "--gpu-class", portal.h100_product,
                         "--limit", "3", "-o", "json")
    assert len(_json(by_class)) == 3
    table = portalctl("nodes", "list", *host, "--sort", "name").stdout.splitlines()
    assert table[0].split()[:3] == ["NAME", "GPU_CLASS", "GPUS"] and len(table) == 9
    assert second in "\n".join(table)


def test_a_platform_admin_suggests_assigns_and_unassigns_nodes(
    portal: Portal, portalctl: PortalCtl
) -> None:
    portalctl.login(portal, "platform-admin")
    host = ("--host-cluster", portal.host_cluster)
    suggestion = _json(portalctl("nodes", "suggest", *host, "--tenant", "acme", "--gpu-class",
                                 portal.h100_product, "--gpus", "8", "-o", "json"))
    assert (suggestion["tenant"], suggestion["gpus"], suggestion["fits_quota"]) == (
        "acme", 8, True)
    node = suggestion["nodes"][0]["name"]
    shown = portalctl("nodes", "suggest", *host, "--tenant", "acme", "--gpu-class",
                      portal.h100_product, "--gpus", "8")
    assert node in shown.stdout and "fits_quota" in shown.stdout

    assigned = _json(portalctl("nodes", "assign", node, *host, "--tenant", "acme", "-o",
                               "json"))
    assert assigned["tenant"] == "acme"
    dedicated = _json(portalctl("nodes", "list", *host, "--tenant", "acme", "-o", "json"))
    assert [n["name"] for n in dedicated] == [node]
    detail = _json(portalctl("nodes", "show", node, *host, "-o", "json"))
    assert [a["tenant"] for a in detail["assignments"]] == ["acme"]

    unassigned = portalctl("nodes", "unassign", node, *host)
    assert unassigned.exit_code == 0, unassigned.stderr
    assert _json(portalctl("nodes", "list", *host, "--tenant", "acme", "-o", "json")) == []
    assert portalctl("nodes", "show", "no-such-node", *host).exit_code == 3
    over = portalctl("nodes", "suggest", *host, "--tenant", "acme", "--gpu-class",
                     portal.h100_product, "--gpus", "0")
    assert over.exit_code == 1 and "gpus" in over.stderr


def test_nodes_are_for_platform_admins(portal: Portal, portalctl: PortalCtl) -> None:
    portalctl.login(portal, "acme-admin")
    node = _node_names(portal)[0]
    assert portalctl("nodes", "list", "--host-cluster", portal.host_cluster).exit_code == 4
    denied = portalctl("nodes", "assign", node, "--host-cluster", portal.host_cluster,
                       "--tenant", "acme")
    assert denied.exit_code == 4 and denied.stderr.startswith("error: ")


def test_gpu_classes_are_listed_for_everyone(portal: Portal, portalctl: PortalCtl) -> None:
    portalctl.login(portal, "acme-viewer")
    classes = _json(portalctl("gpu-classes", "list", "-o", "json"))
    assert [(c["id"], c["product"]) for c in classes] == [
        (portal.h100_id, portal.h100_product)]
    assert classes[0]["capacity"] is None  # the fleet's figures are for platform admins
    table = portalctl("gpu-classes", "list").stdout
    assert "H100 80GB" in table
    portalctl("--profile", "ops", "login", "--url", portal.url, "--token-stdin",
              stdin=portal.tokens["platform-admin"])
    ops = _json(portalctl("--profile", "ops", "gpu-classes", "list", "-o", "yaml"),
                parse=False)
    assert "capacity:" in ops and "total: 64" in ops


def _node_names(portal: Portal) -> list[str]:
    with portal.database.session() as db:
        return list(db.scalars(select(Node.name).order_by(Node.id)))


def _json(result: Result, *, parse: bool = True) -> Any:
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout) if parse else result.stdout


def test_portalctl_fleet_shows_capacity_per_host_and_per_region(
    portal: Portal, portalctl: PortalCtl
) -> None:
    portalctl.login(portal, "platform-admin")
    api = httpx.get(f"{portal.url}/api/v1/fleet/capacity",
                    headers={"Authorization": f"Bearer {portal.tokens['platform-admin']}"})
    by_host = _json(portalctl("fleet", "-o", "json"))
    assert by_host == api.json()["hosts"]
    assert [(h["host_cluster"], h["total"], h["free"]) for h in by_host] == [
        (portal.host_cluster, 64, 64)]
    by_host_table = portalctl("fleet").stdout.splitlines()
    assert by_host_table[0].split()[-2:] == ["BORROWED", "LENT_FROM_IDLE_GUARANTEES"]
    table = portalctl("fleet", "--by", "region").stdout.splitlines()
    assert table[0].split()[:3] == ["REGION", "GPU_CLASS", "HOSTS"]
    assert portal.host_cluster in table[1] and portal.h100_product in table[1]
    assert portalctl("fleet", "--region", "nowhere", "-o", "json").stdout.strip() == "[]"
