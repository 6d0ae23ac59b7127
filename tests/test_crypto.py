from __future__ import annotations

import pytest
from cryptography.fernet import Fernet

from app.kit.crypto import SecretBox, UnreadableSecret


def test_sealed_secrets_open_with_the_same_key_only() -> None:
    box = SecretBox(Fernet.generate_key().decode())
    sealed = box.seal("apiVersion: v1\nkind: Config")
    assert "apiVersion" not in sealed
    assert box.open(sealed) == "apiVersion: v1\nkind: Config"
    with pytest.raises(ValueError, match="PORTAL_ENCRYPTION_KEY"):
        SecretBox(Fernet.generate_key().decode()).open(sealed)


def test_during_a_rotation_old_keys_still_open_what_they_sealed() -> None:
    old, new = Fernet.generate_key().decode(), Fernet.generate_key().decode()
    sealed_before = SecretBox(old).seal("kind: Config")
    box = SecretBox(new, [old])
    assert box.open(sealed_before) == "kind: Config"
    assert not box.sealed_with_current_key(sealed_before)
    sealed_now = box.seal("kind: Config")
    assert box.sealed_with_current_key(sealed_now)
    assert SecretBox(new).open(sealed_now) == "kind: Config"


def test_resealing_moves_a_secret_to_the_current_key() -> None:
    old, new = Fernet.generate_key().decode(), Fernet.generate_key().decode()
    resealed = SecretBox(new, [old]).reseal(SecretBox(old).seal("kind: Config"))
    assert SecretBox(new).open(resealed) == "kind: Config"
    with pytest.raises(UnreadableSecret, match="PORTAL_ENCRYPTION_OLD_KEYS"):
        SecretBox(old).open(resealed)
