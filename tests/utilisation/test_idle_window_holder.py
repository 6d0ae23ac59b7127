"""A GPU's window is its holder's: a pod bound moments ago on a GPU that sat unbound (or held
by another pod) before is not called idle from those earlier series, and an idle pod's peak is
its own series' peak, not the unbound GPU's 0 % before it."""

from __future__ import annotations

from app.kit.config import Settings
from app.utilisation.mapping import Owner, Ownership
from app.utilisation.service import read_owned
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
