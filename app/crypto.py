"""Secrets at rest (cluster admin credentials) encrypted with PORTAL_ENCRYPTION_KEY (Fernet)."""

from __future__ import annotations

from cryptography.fernet import Fernet, InvalidToken


class SecretBox:
    def __init__(self, key: str) -> None:
        self._fernet = Fernet(key.encode())

    def seal(self, plaintext: str) -> str:
        return self._fernet.encrypt(plaintext.encode()).decode()

    def open(self, sealed: str) -> str:
        try:
            return self._fernet.decrypt(sealed.encode()).decode()
        except InvalidToken as error:
            raise ValueError(
                "stored secret cannot be decrypted: was PORTAL_ENCRYPTION_KEY changed?"
            ) from error
