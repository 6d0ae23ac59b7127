"""Files the tests read from beside the checkout (``../shared``) and from the project itself."""

from pathlib import Path
from typing import Final

ROOT: Final = Path(__file__).resolve().parents[2]
SHARED: Final = ROOT.parent / "shared"
REFERENCE: Final = SHARED / "reference"
HOST_NODES: Final = REFERENCE / "host-nodes.json"
# KAI Scheduler's real Queue CRD and the Compose Specification's schema, read where they are.
KAI_QUEUE_CRD: Final = REFERENCE / "kai-queue-crd.yaml"
COMPOSE_SPEC_SCHEMA: Final = REFERENCE / "compose-spec.schema.json"
