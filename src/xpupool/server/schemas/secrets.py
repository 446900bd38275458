"""A tenant's secrets on the wire (``/v1/secrets``): a value goes in once and never comes out.

The value's fields are named ``secret`` and ``secret_base64`` (not ``value``) so that the API's
422 answers, which quote a rejected value, know to leave these out (``error_answers.py``).
"""

from __future__ import annotations

import base64
import binascii

from pydantic import Field, model_validator

from xpupool.server.schemas.base import Lenient, Name, Strict

MAX_SECRET_BYTES = 64 * 1024
SECRET_FIELDS = frozenset({"secret", "secret_base64"})
"""Fields whose value no answer, log or audit row may quote."""


class SecretIn(Strict):
    """A secret's value: text, or any bytes in base64 (a key file, a keystore)."""

    secret: str | None = Field(
        None, description="The value as text (no NUL byte).", json_schema_extra={"writeOnly": True}
    )
    secret_base64: str | None = Field(
        None, description="The value as standard base64.", json_schema_extra={"writeOnly": True}
    )

    @model_validator(mode="after")
    def _one(self) -> SecretIn:
        if (self.secret is None) == (self.secret_base64 is None):
            raise ValueError("give 'secret' or 'secret_base64', exactly one")
        if len(self.value()) > MAX_SECRET_BYTES:
            raise ValueError(f"a secret holds at most {MAX_SECRET_BYTES} bytes")
        return self

    def value(self) -> bytes:
        if self.secret is not None:
            return self.secret.encode()
        try:
            return base64.b64decode(self.secret_base64 or "", validate=True)
        except (binascii.Error, ValueError):
            raise ValueError("secret_base64 is not standard base64") from None


class Secret(Lenient):
    """A secret as listed: its name and size, never its value."""

    name: Name
    size: int = Field(description="Bytes of the value.")
    created_at: float
    updated_at: float


class KeyRotation(Lenient):
    """What a rotation of the secret key did."""

    resealed: int = Field(description="Secrets sealed again under the new key.")
    key_id: str = Field(description="The new key's name (a digest, never the key).")
