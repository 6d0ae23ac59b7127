from __future__ import annotations

import pytest
from cryptography.fernet import Fernet

from app.crypto import SecretBox


def test_sealed_secrets_open_with_the_same_key_only() -> None:
    box = SecretBox(Fernet.generate_key().decode())
    sealed = box.seal("apiVersion: v1\nkind: Config")
    assert "apiVersion" not in sealed
    assert box.open(sealed) == "apiVersion: v1\nkind: Config"
    with pytest.raises(ValueError, match="PORTAL_ENCRYPTION_KEY"):
        SecretBox(Fernet.generate_key().decode()).open(sealed)
