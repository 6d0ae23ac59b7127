"""A GPU's window is its holder's: a pod bound moments ago on a GPU that sat unbound (or held
by another pod) before is not called idle from those earlier series, and an idle pod's peak is
its own series' peak, not the unbound GPU's 0 % before it."""

from __future__ import annotations

from datetime import UTC, datetime

from app.kit.config import Settings
from app.utilisation.mapping import Owner, Ownership
from app.utilisation.service import read_owned
from app.utilisation.windows import Asked, cluster_peaks, window_query
from tests.support.fake_prometheus import Answers, fake_prometheus
from tests.utilisation.support import PEAK, TRAIN_NS, UTIL, gpu

OWNERSHIP = Ownership(by_namespace={TRAIN_NS: Owner("acme", "train", "NVIDIA-H100-80GB-HBM3")},
                      by_node={})
FRESH = gpu("GPU-1", "pool-1", exported_namespace=TRAIN_NS, exported_pod="render-0")
IDLE = gpu("GPU-2", "pool-1", exported_namespace=TRAIN_NS, exported_pod="notebook-0")


def test_earlier_series_of_a_gpu_never_make_its_new_holder_idle(settings: Settings) -> None:
    unbound_before = [(gpu("GPU-1", "pool-1"), 0.0), (gpu("GPU-2", "pool-1"), 0.0)]
    answers = Answers(instant={
        UTIL: [(FRESH, 85.0), (IDLE, 2.0)],
        # GPU-1's pod is younger than the window: only the GPU's unbound series spans it.
        PEAK: [*unbound_before, (IDLE, 2.0)]})
    with fake_prometheus(answers) as url:
        reading = read_owned(OWNERSHIP, settings.model_copy(update={
            "prometheus_url": url, "idle_gpu_window_minutes": 30}))
    shown = {g.pod: (g.peak_in_window_percent, g.idle(5.0)) for g in reading.gpus}
    assert shown == {"render-0": (None, False), "notebook-0": (2.0, True)}


def test_a_private_nodes_spare_gpus_never_stand_in_for_its_held_ones(settings: Settings) -> None:
    """A private-nodes cluster with two GPUs bound on a machine of four: only the bound GPUs'
    peaks are its figures. Counting the spare ones would make up for a held GPU with no
    series in the window, and call the cluster idle while that GPU computes."""
    ownership = Ownership(by_namespace={}, by_node={"m-1": Owner("acme", "train")})
    held = gpu("GPU-1", "m-1", exported_namespace=TRAIN_NS, exported_pod="render-0")
    spares = [gpu("GPU-3", "m-1"), gpu("GPU-4", "m-1")]
    window = window_query(1800)
    answers = Answers(instant={window: [(held, 1.0), *((spare, 0.0) for spare in spares)]})
    with fake_prometheus(answers) as url:
        peaks = cluster_peaks(settings.model_copy(update={"prometheus_url": url}), ownership,
                              {7: Asked("acme", "train", 1800)}, datetime.now(UTC))
    assert peaks == {7: [1.0]}
