"""Files the tests read from beside the checkout (``../shared``) and from the project itself."""

from pathlib import Path
from typing import Final

ROOT: Final = Path(__file__).resolve().parents[2]
SHARED: Final = ROOT.parent / "shared"
REFERENCE: Final = SHARED / "reference"
HOST_NODES: Final = REFERENCE / "host-nodes.json"
# KAI Scheduler's Queue CRD, vendored with its licence header (NVIDIA/KAI-Scheduler, Apache-2.0).
KAI_QUEUE_CRD: Final = ROOT / "tests" / "kube" / "data" / "kai-queue-crd.yaml"
