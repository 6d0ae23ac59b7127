"""Files the tests read from beside the checkout (``../shared``) and from the project itself."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SHARED = ROOT.parent / "shared"
REFERENCE = SHARED / "reference"
HOST_NODES = REFERENCE / "host-nodes.json"
# KAI Scheduler's Queue CRD, vendored with its licence header (NVIDIA/KAI-Scheduler, Apache-2.0).
KAI_QUEUE_CRD = ROOT / "tests" / "kube" / "data" / "kai-queue-crd.yaml"
