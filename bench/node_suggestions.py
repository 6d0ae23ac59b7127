"""Node suggestions for dedicated assignment: time and packing quality against first fit.

A new fleet of 10,000 8-GPU nodes in racks of 16 to 32 nodes, all free, and
1,000 tenants asking in turn for 8 to 256 GPUs. Each strategy serves the same requests in the
same order, taking its suggested nodes out of the free pool. Printed per strategy: time per
suggestion (the pure placement function; plus one run through the service and an SQLite
inventory for the query cost), racks per assignment, and how much free capacity is left
fragmented (free GPUs in racks that are no longer whole).

Run: ``.venv/bin/python -m bench.node_suggestions [--nodes N] [--tenants N] [--seed N]``.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from app.nodes.placement import FreeNode, Suggestion, first_fit, fragmentation, suggest

GPUS_PER_NODE = 8
ASKS = (8, 8, 16, 16, 16, 32, 32, 64, 128, 256)
Strategy = Callable[[list[FreeNode], int], Suggestion | None]


@dataclass
class Figures:
    name: str
    seconds: list[float]
    racks_per_assignment: list[int]
    unmet: int
    fragmented_share: float
    whole_free_racks: int
    largest_free_rack_gpus: int

    def line(self) -> str:
        seconds = sorted(self.seconds)
        p95 = seconds[int(len(seconds) * 0.95) - 1] if seconds else 0.0
        racks = self.racks_per_assignment or [0]
        multi = sum(r > 1 for r in racks) / len(racks)
        return (f"{self.name:<10} {statistics.mean(seconds or [0]) * 1000:8.2f} ms "
                f"{p95 * 1000:8.2f} ms {statistics.mean(racks):7.2f} {multi:9.1%} "
                f"{self.unmet:6d} {self.fragmented_share:12.1%} {self.whole_free_racks:11d} "
                f"{self.largest_free_rack_gpus:12d}")


def build_fleet(nodes: int, rng: random.Random) -> tuple[list[FreeNode], dict[str, int]]:
    """A new fleet, every node free, and each rack's whole capacity."""
    fleet: list[FreeNode] = []
    rack_gpus: dict[str, int] = {}
    rack_no = 0
    while len(fleet) < nodes:
        rack_no += 1
        size = min(rng.randint(16, 32), nodes - len(fleet))
        rack = f"rack-{rack_no:04d}"
        rack_gpus[rack] = size * GPUS_PER_NODE
        fleet += [FreeNode(f"{rack}-n{i:02d}", GPUS_PER_NODE, rack=rack, zone="z1")
                  for i in range(size)]
    return fleet, rack_gpus


def serve(name: str, strategy: Strategy, free: list[FreeNode], rack_gpus: dict[str, int],
          asks: list[int]) -> Figures:
    pool = {node.name: node for node in free}
    seconds: list[float] = []
    racks: list[int] = []
    unmet = 0
    for ask in asks:
        candidates = list(pool.values())
        started = time.perf_counter()
        chosen = strategy(candidates, ask)
        seconds.append(time.perf_counter() - started)
        if chosen is None:
            unmet += 1
            continue
        racks.append(len(chosen.racks))
        for node in chosen.nodes:
            del pool[node.name]
    free_by_rack = Counter[str]()
    for node in pool.values():
        free_by_rack[node.rack] += node.gpus
    whole = [rack for rack, gpus in free_by_rack.items() if gpus == rack_gpus[rack]]
    return Figures(name, seconds, racks, unmet, fragmentation(dict(free_by_rack), rack_gpus),
                   len(whole), max(free_by_rack.values(), default=0))


def run(nodes: int = 10_000, tenants: int = 1_000, seed: int = 7) -> list[Figures]:
    rng = random.Random(seed)
    free, rack_gpus = build_fleet(nodes, rng)
    asks = [rng.choice(ASKS) for _ in range(tenants)]
    return [serve("first-fit", first_fit, free, rack_gpus, asks),
            serve("portal", suggest, free, rack_gpus, asks)]


def service_seconds(nodes: int, calls: int = 20) -> float:
    """Mean time of ``service.suggest_nodes`` on an SQLite inventory of ``nodes`` nodes."""
    from app.auth.models import User
    from app.auth.principal import Principal
    from app.database.core import Base, Database
    from app.gpu_classes.models import GpuClass
    from app.hosts.models import HostCluster
    from app.nodes import service
    from app.nodes.models import Node
    from app.nodes.schemas import SuggestionIn
    from app.tenants.models import Tenant

    database = Database("sqlite://")
    Base.metadata.create_all(database.engine)
    with database.transaction() as db:
        admin = User(email="bench@example.com", name="bench", is_platform_admin=True,
                     issuer="bench", subject="bench")
        host, gpu = HostCluster(name="default", is_default=True), GpuClass(
            product="NVIDIA-H100-80GB-HBM3", display_name="H100")
        db.add_all([admin, host, gpu, Tenant(slug="acme", display_name="Acme")])
        db.flush()
        db.add_all(Node(host_cluster_id=host.id, name=f"n{i:05d}", gpu_class_id=gpu.id,
                        gpu_count=GPUS_PER_NODE, rack=f"rack-{i // 24:04d}", ready=True)
                   for i in range(nodes))
    principal = Principal(user=admin, via="token")
    payload = SuggestionIn(tenant="acme", gpu_class="NVIDIA-H100-80GB-HBM3", gpus=64)
    with database.session() as db:
        started = time.perf_counter()
        for _ in range(calls):
            service.suggest_nodes(db, principal, payload)
        elapsed = (time.perf_counter() - started) / calls
    database.dispose()
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=10_000)
    parser.add_argument("--tenants", type=int, default=1_000)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    started = time.perf_counter()
    results = run(args.nodes, args.tenants, args.seed)
    print(f"{args.nodes} nodes x {GPUS_PER_NODE} GPUs, {args.tenants} tenants asking "
          f"{min(ASKS)}-{max(ASKS)} GPUs each, seed {args.seed}")
    print(f"{'strategy':<10} {'mean':>11} {'p95':>11} {'racks':>7} {'multi-rack':>9} "
          f"{'unmet':>6} {'fragmented':>12} {'whole racks':>11} {'largest free':>12}")
    for figures in results:
        print(figures.line())
    print(f"service.suggest_nodes on SQLite with {args.nodes} nodes: "
          f"{service_seconds(args.nodes) * 1000:.1f} ms per suggestion (query included)")
    print(f"total {time.perf_counter() - started:.1f} s")


if __name__ == "__main__":
    main()
