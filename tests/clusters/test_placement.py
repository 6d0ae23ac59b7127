"""Placement picks the host a new cluster goes to: state, class, region, quota, dedicated nodes;
ties broken by capacity, then name; and every host's refusal is named."""

from __future__ import annotations

from collections.abc import Mapping

from app.clusters.placement import HostFacts, Placed, PlacementRequest, Unplaceable, place

H100, A100 = 1, 2


def host(name: str, region: str = "eu", *, state: str = "active", h100: int = 0,
         free: int | None = None, tenant_nodes: int = 0, a100: int = 0) -> HostFacts:
    classes = {k: v for k, v in ((H100, h100), (A100, a100)) if v}
    free_gpus = dict(classes)
    if free is not None:
        free_gpus[H100] = free
    return HostFacts(id=sum(map(ord, name)), name=name, region=region,
                     state=state, class_gpus=classes, free_gpus=free_gpus,
                     tenant_node_gpus={H100: tenant_nodes} if tenant_nodes else {})


def ask(gpus: int = 4, *, region: str | None = None, placement: str = "shared-pool",
        quota: Mapping[str, int] | None = None, gpu_class: int | None = H100) -> PlacementRequest:
    return PlacementRequest(placement=placement, gpu_class_id=gpu_class, gpu_class_name="H100",
                            gpus=gpus, region=region,
                            quota_free=quota if quota is not None else {"eu": 16, "us": 16})


def placed(result: Placed | Unplaceable) -> str:
    assert isinstance(result, Placed), result
    return result.host_name


def refused(result: Placed | Unplaceable) -> dict[str, tuple[str, ...]]:
    assert isinstance(result, Unplaceable), result
    return {h.host_name: h.reasons for h in result.hosts}


def test_a_host_without_the_class_is_not_chosen() -> None:
    hosts = [host("a-host", a100=8), host("b-host", h100=8)]
    assert placed(place(hosts, ask())) == "b-host"


def test_a_class_no_host_shows_yet_rules_no_host_out() -> None:
    """Declared by an admin ahead of its nodes: placed by the other rules."""
    hosts = [host("b", a100=16), host("a", a100=8, state="cordoned"), host("c", a100=8)]
    assert placed(place(hosts, ask())) == "b"


def test_the_requested_region_is_kept_even_when_another_has_more_room() -> None:
    hosts = [host("eu-1", "eu", h100=8), host("us-1", "us", h100=64)]
    assert placed(place(hosts, ask(region="eu"))) == "eu-1"
    assert placed(place(hosts, ask(region="us"))) == "us-1"


def test_without_a_region_the_portal_picks_one_where_the_quota_has_room() -> None:
    hosts = [host("eu-1", "eu", h100=64), host("us-1", "us", h100=8)]
    result = place(hosts, ask(quota={"eu": 2, "us": 8}))
    assert placed(result) == "us-1"
    assert isinstance(result, Placed)
    assert result.region == "us"
    assert "chosen by the portal" in result.reason


def test_cordoned_and_draining_hosts_take_no_new_clusters() -> None:
    hosts = [host("a", state="cordoned", h100=64), host("b", state="draining", h100=64),
             host("c", h100=8)]
    assert placed(place(hosts, ask())) == "c"
    reasons = refused(place(hosts[:2], ask()))
    assert reasons["a"] == ("host is cordoned and takes no new clusters",)
    assert reasons["b"] == ("host is draining and takes no new clusters",)


def test_dedicated_nodes_go_where_the_tenant_has_nodes_with_room() -> None:
    hosts = [host("a", h100=64, free=64), host("b", h100=16, free=0, tenant_nodes=8)]
    assert placed(place(hosts, ask(4, placement="dedicated-nodes"))) == "b"
    reasons = refused(place(hosts, ask(12, placement="dedicated-nodes")))
    assert "dedicated H100 nodes here have room for 8 GPUs, 12 asked" in reasons["b"][0]
    assert "room for 0 GPUs" in reasons["a"][0]


def test_ties_go_to_the_host_with_most_free_capacity_then_the_name() -> None:
    assert placed(place([host("a", h100=16, free=4), host("b", h100=16, free=12)],
                        ask())) == "b"
    assert placed(place([host("b", h100=16), host("a", h100=16)], ask())) == "a"
    # the order the hosts come in does not matter
    hosts = [host(n, h100=8) for n in ("m", "c", "x")]
    assert {placed(place(order, ask())) for order in (hosts, hosts[::-1])} == {"c"}


def test_a_host_whose_free_capacity_covers_the_request_comes_first() -> None:
    # b has less free capacity in all, but a is overcommitted for this request
    hosts = [host("a", h100=16, free=2), host("b", h100=16, free=4)]
    assert placed(place(hosts, ask(4))) == "b"
    # none covers it: still placed (quota was granted, maybe overcommitted), on the most free
    assert placed(place(hosts, ask(8, quota={"eu": 8}))) == "b"


def test_no_gpus_asked_needs_no_class_and_no_quota() -> None:
    hosts = [host("a", a100=2), host("b", h100=8, state="cordoned"), host("c", h100=4)]
    assert placed(place(hosts, ask(0, gpu_class=None, quota={}))) == "c"


def test_when_nothing_fits_each_host_says_why() -> None:
    hosts = [host("eu-1", "eu", state="cordoned", h100=8), host("us-1", "us", a100=8),
             host("eu-2", "eu", h100=8)]
    result = place(hosts, ask(region="eu", quota={"eu": 2}))
    reasons = refused(result)
    assert reasons == {
        "eu-1": ("host is cordoned and takes no new clusters",
                 "the tenant's H100 quota in region eu has room for 2 GPUs, 4 asked"),
        "eu-2": ("the tenant's H100 quota in region eu has room for 2 GPUs, 4 asked",),
        "us-1": ("in region us, not eu", "has no H100 nodes",
                 "the tenant's H100 quota in region us has room for 0 GPUs, 4 asked"),
    }
    assert isinstance(result, Unplaceable)
    assert result.message.startswith("no host cluster fits: eu-1 (eu): host is cordoned")


def test_no_hosts_at_all() -> None:
    result = place([], ask())
    assert isinstance(result, Unplaceable)
    assert result.message == "no host cluster is registered"


def test_the_reason_names_the_host_region_and_why() -> None:
    only = place([host("eu-1", h100=8), host("us-1", "us", h100=8)], ask(region="eu"))
    assert isinstance(only, Placed)
    assert only.reason == ("eu-1: region eu as requested; 8 free H100 GPUs; "
                           "the only one of 2 hosts that fits")
    several = place([host("eu-1", h100=8), host("eu-2", h100=4)], ask(region="eu"))
    assert isinstance(several, Placed)
    assert several.reason.endswith("most free capacity of 2 fitting hosts, then name")
    dedicated = place([host("eu-1", h100=8, tenant_nodes=8)],
                      ask(placement="dedicated-nodes"))
    assert isinstance(dedicated, Placed)
    assert "8 GPUs free on the tenant's dedicated H100 nodes" in dedicated.reason


def test_the_reason_counts_one_gpu_and_one_host_in_the_singular() -> None:
    placed = place([host("eu-1", h100=1)], ask(gpus=1))
    assert isinstance(placed, Placed)
    assert placed.reason == ("eu-1: region eu chosen by the portal; 1 free H100 GPU; "
                             "the only host")


def test_a_host_the_portal_cannot_reach_takes_no_new_clusters() -> None:
    silent = HostFacts(id=1, name="a", region="eu", state="active", class_gpus={H100: 64},
                       free_gpus={H100: 64}, tenant_node_gpus={}, answers=False)
    no_keys = HostFacts(id=2, name="b", region="eu", state="active", class_gpus={H100: 64},
                        free_gpus={H100: 64}, tenant_node_gpus={}, has_credentials=False)
    assert refused(place([silent, no_keys], ask())) == {
        "a": ("it did not answer its last health check",),
        "b": ("the portal has no credentials for it",)}
    assert placed(place([silent, no_keys, host("c", h100=8)], ask())) == "c"


def test_when_every_host_is_closed_the_message_says_so() -> None:
    result = place([host("a", state="cordoned", h100=8), host("b", state="draining", h100=8)],
                   ask())
    assert isinstance(result, Unplaceable)
    assert result.message.startswith(
        "no host cluster takes new clusters: every host is cordoned or draining: a (eu)")


def test_shared_pool_needs_a_host_whose_api_server_reaches_the_webhook() -> None:
    """On the open-source vCluster, shared-pool pods join their KAI queue through the
    portal's webhook: a host without a way to it gets none; dedicated nodes do not need it."""
    hookless = HostFacts(id=1, name="a", region="eu", state="active", class_gpus={H100: 64},
                         free_gpus={H100: 64}, tenant_node_gpus={H100: 8}, has_webhook=False)
    needing = PlacementRequest(placement="shared-pool", gpu_class_id=H100, gpu_class_name="H100",
                               gpus=4, region=None, quota_free={"eu": 16},
                               needs_webhook=True)
    assert refused(place([hookless], needing)) == {"a": (
        "no admission webhook URL is set for it, and shared-pool pods need the webhook to "
        "join their KAI queue",)}
    assert placed(place([hookless, host("b", h100=8)], needing)) == "b"
    assert placed(place([hookless], ask(placement="dedicated-nodes"))) == "a"


def test_a_hardened_cluster_needs_a_host_whose_api_server_reaches_the_webhook() -> None:
    """The webhook hardens a hardened template's pods (seccomp, user namespaces): a host
    without a way to it gets no such cluster, whatever the placement; the refusal names what
    the pods need the webhook for."""
    hookless = HostFacts(id=1, name="a", region="eu", state="active", class_gpus={H100: 64},
                         free_gpus={H100: 64}, tenant_node_gpus={H100: 8}, has_webhook=False)
    seccomp = PlacementRequest(placement="dedicated-nodes", gpu_class_id=H100,
                               gpu_class_name="H100", gpus=4, region=None,
                               quota_free={"eu": 16}, hardening="seccomp")
    assert refused(place([hookless], seccomp)) == {"a": (
        "no admission webhook URL is set for it, and the cluster's pods get their hardening "
        "(the seccomp RuntimeDefault profile) from the webhook",)}
    both = PlacementRequest(placement="shared-pool", gpu_class_id=H100, gpu_class_name="H100",
                            gpus=4, region=None, quota_free={"eu": 16}, needs_webhook=True,
                            hardening="user-namespaces")
    assert refused(place([hookless], both)) == {"a": (
        "no admission webhook URL is set for it, and shared-pool pods need the webhook to join "
        "their KAI queue, and the cluster's pods get their hardening (user namespaces, "
        "hostUsers: false, and the seccomp RuntimeDefault profile) from the webhook",)}
    assert placed(place([hookless, host("b", h100=8, tenant_nodes=8)], seccomp)) == "b"
    unhardened = PlacementRequest(placement="dedicated-nodes", gpu_class_id=H100,
                                  gpu_class_name="H100", gpus=4, region=None,
                                  quota_free={"eu": 16})
    assert placed(place([hookless], unhardened)) == "a"
