"""Files shared by every checkout, next to the repository: ``../shared`` from its root."""

from pathlib import Path
from typing import Final

SHARED: Final = Path(__file__).resolve().parents[2].parent / "shared"
REFERENCE: Final = SHARED / "reference"
