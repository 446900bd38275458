"""The key that seals tenants' secrets at rest, and the sealing itself.

A secret is sealed with AES-256-GCM under the key in one file (``--secret-key-file``; by default
``secret.key`` in the data dir, which protects only a leaked database or backup, not a leaked data
dir: docs/security.md). The tenant and the secret's name are the sealing's associated data, so a
sealed value copied onto another tenant's row, or another name, does not open. Each sealed value
names the key that sealed it (``key_id``: a digest of the key, never the key), so a rotation that
was cut off half way is finished at the next start without guessing.

Rotation writes the new key beside the old one (``<file>.new``), re-seals every row in one store
transaction, then renames the new key over the old: a crash before the commit leaves the old key
and old rows (the ``.new`` file is dropped at the next open); a crash after it leaves new rows and
both files, and the next open finishes the rename.

``cryptography`` is imported only when a secret is sealed or opened, not when the server starts.
"""

from __future__ import annotations

import base64
import hashlib
import os
import secrets as token_bytes
import stat
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from xpupool.model.errors import XpupoolError

KEY_BYTES = 32  # AES-256
NONCE_BYTES = 12  # GCM's standard nonce


class SecretKeyError(XpupoolError):
    """The key file cannot be used (unreadable, other users may read it, not a key); one line
    naming the file and the reason."""


class SealBrokenError(XpupoolError):
    """A sealed value does not open with the key it names (tampered, moved to another row, or
    sealed under a key this server does not hold)."""


def key_id(key: bytes) -> str:
    """The name of ``key`` stored with each value it seals: 16 hex digits of its SHA-256."""
    return hashlib.sha256(b"xpupool secret key\0" + key).hexdigest()[:16]


def _associated(tenant: str, name: str) -> bytes:
    return f"xpupool secret\0{tenant}\0{name}".encode()


def _aesgcm(key: bytes) -> Any:
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    return AESGCM(key)


@dataclass(frozen=True, slots=True)
class Sealed:
    key_id: str
    data: bytes  # nonce + ciphertext + tag


def seal(key: bytes, tenant: str, name: str, value: bytes) -> Sealed:
    nonce = os.urandom(NONCE_BYTES)
    data = nonce + _aesgcm(key).encrypt(nonce, value, _associated(tenant, name))
    return Sealed(key_id(key), data)


def unseal(keys: dict[str, bytes], tenant: str, name: str, sealed: Sealed) -> bytes:
    from cryptography.exceptions import InvalidTag

    key = keys.get(sealed.key_id)
    if key is None:
        raise SealBrokenError(
            f"secret {name!r} of tenant {tenant!r} is sealed under a key not held"
        )
    nonce, body = sealed.data[:NONCE_BYTES], sealed.data[NONCE_BYTES:]
    try:
        value: bytes = _aesgcm(key).decrypt(nonce, body, _associated(tenant, name))
    except InvalidTag:
        raise SealBrokenError(f"secret {name!r} of tenant {tenant!r} does not open") from None
    return value


def _read_key(path: Path) -> bytes:
    try:
        st = path.stat()
        text = path.read_text().strip()
    except OSError as exc:
        raise SecretKeyError(f"{path}: cannot read the secret key: {exc.strerror}") from None
    if st.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        mode = oct(stat.S_IMODE(st.st_mode))
        raise SecretKeyError(
            f"{path}: other users may read the secret key (mode {mode}); chmod 600"
        )
    try:
        key = base64.b64decode(text, validate=True)
    except ValueError:
        key = b""
    if len(key) != KEY_BYTES:
        raise SecretKeyError(f"{path}: not a secret key (base64 of {KEY_BYTES} bytes)")
    return key


def _write_key(path: Path, key: bytes) -> None:
    """``key`` into a new file at ``path``, mode 0600 from the start, on disk before returning."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.write(fd, base64.b64encode(key) + b"\n")
        os.fsync(fd)
    finally:
        os.close(fd)


def _sync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class SecretBox:
    """The server's secret key (made on first use when the file does not exist) and the pending
    new key of a rotation cut off half way."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._key: bytes | None = None

    @property
    def pending(self) -> Path:
        return self.path.with_name(self.path.name + ".new")

    def key(self) -> bytes:
        if self._key is None:
            if not self.path.exists() and not self.pending.exists():
                self.path.parent.mkdir(parents=True, exist_ok=True)
                with suppress(FileExistsError):  # another thread made it first
                    _write_key(self.path, token_bytes.token_bytes(KEY_BYTES))
                _sync_dir(self.path.parent)
            self._key = _read_key(self.path)
        return self._key

    def recover(self, stored_key_ids: Callable[[], set[str]]) -> None:
        """Finish or drop a rotation cut off half way: the new key replaces the old one when the
        stored values are sealed under it, and is deleted when they are not (the re-sealing
        transaction never committed)."""
        if not self.pending.exists():
            return
        new = _read_key(self.pending)
        if key_id(new) in stored_key_ids():
            os.replace(self.pending, self.path)
        else:
            self.pending.unlink()
        _sync_dir(self.path.parent)
        self._key = None

    def seal(self, tenant: str, name: str, value: bytes) -> Sealed:
        return seal(self.key(), tenant, name, value)

    def unseal(self, tenant: str, name: str, sealed: Sealed) -> bytes:
        key = self.key()
        return unseal({key_id(key): key}, tenant, name, sealed)

    def rotate(self, reseal_all: Callable[[Callable[[str, str, Sealed], Sealed]], int]) -> int:
        """A new key: written beside the old one, every stored value re-sealed under it by
        ``reseal_all`` (one store transaction, given the function that re-seals one value), then
        made the key. Returns how many values were re-sealed."""
        old = self.key()
        new = token_bytes.token_bytes(KEY_BYTES)
        if self.pending.exists():  # a rotation that never committed (recover drops these)
            self.pending.unlink()
        _write_key(self.pending, new)
        _sync_dir(self.path.parent)
        keys = {key_id(old): old}

        def reseal(tenant: str, name: str, sealed: Sealed) -> Sealed:
            return seal(new, tenant, name, unseal(keys, tenant, name, sealed))

        try:
            count = reseal_all(reseal)
        except BaseException:
            self.pending.unlink(missing_ok=True)
            raise
        os.replace(self.pending, self.path)
        _sync_dir(self.path.parent)
        self._key = new
        return count
