"""Tenants' secrets (``/v1/secrets``): set, list, delete, and the key's rotation.

A value is sealed as it arrives (``server/secret_box.py``) and never leaves the server again
through the API: listings carry names and sizes, and a job gets its secrets on its node only
(docs/security.md). A tenant reaches its own secrets; the admin reaches any tenant's by naming
it, and its own by naming none: the plane's credentials (a Kubernetes site's kubeconfig, the
sites file's ``kubeconfig_secret``), which no tenant reaches. A site reading one is told when it
is set again (``Sites.secret_changed``), so rotated credentials take effect without a restart.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sqlalchemy import select

from xpupool.model.errors import Forbidden, NotFound, RequestError
from xpupool.server.auth import Principal
from xpupool.server.plane import secret_rows
from xpupool.server.schemas.secrets import KeyRotation, Secret, SecretIn
from xpupool.server.secret_box import key_id
from xpupool.server.storage.tenants import tenants as t_tenants

if TYPE_CHECKING:
    from xpupool.server.plane.control import ControlPlane


def owner(plane: ControlPlane, who: Principal, tenant: str | None) -> str | None:
    """Whose secrets ``who`` means: a tenant its own; the admin the tenant it names, or its own
    when it names none (None)."""
    if who.is_admin:
        if tenant is None:
            return None
        with plane.db.connect() as conn:
            found = conn.execute(select(t_tenants.c.name).where(t_tenants.c.name == tenant))
            if found.first() is None:
                raise NotFound("tenant", tenant)
        return tenant
    if who.tenant is None:
        raise Forbidden("only a tenant or the admin has secrets")
    if tenant is not None and tenant != who.tenant:
        raise Forbidden(f"tenant {who.tenant!r} cannot reach tenant {tenant!r}'s secrets")
    return who.tenant


def set_secret(
    plane: ControlPlane, tenant: str | None, name: str, body: SecretIn
) -> tuple[Secret, bool]:
    """Seal and store ``body``'s value as ``tenant``'s ``name`` (None: the admin's own, and the
    sites reading it are told); the secret as listed, and whether it is new."""
    try:
        value = body.value()
    except ValueError as exc:
        raise RequestError("secret_base64", None, str(exc)) from None
    sealed = plane.secret_box.seal(secret_rows.ADMIN if tenant is None else tenant, name, value)
    now = plane.clock()
    created = secret_rows.put(plane, tenant, name, sealed, len(value), now)
    if tenant is None:
        plane.sites.secret_changed(name)
    row = next(r for r in secret_rows.listed(plane, tenant) if r["name"] == name)
    return Secret(**row), created


def list_secrets(plane: ControlPlane, tenant: str | None) -> list[Secret]:
    return [Secret(**r) for r in secret_rows.listed(plane, tenant)]


def delete_secret(plane: ControlPlane, tenant: str | None, name: str) -> None:
    if not secret_rows.remove(plane, tenant, name):
        raise NotFound("secret", name)


def admin_secret(plane: ControlPlane, name: str) -> bytes:
    """The value of the admin's own secret ``name``, opened (a Kubernetes site's kubeconfig).
    Raises NotFound when there is none, ``SealBrokenError`` when it does not open."""
    with plane.db.connect() as conn:
        found = secret_rows.sealed(conn, None, [name]).get(name)
    if found is None:
        raise NotFound("secret", name)
    return plane.secret_box.unseal(secret_rows.ADMIN, name, found)


def rotate_key(plane: ControlPlane) -> KeyRotation:
    """Every secret sealed again under a new key, which then replaces the old one."""
    count = plane.secret_box.rotate(lambda reseal: secret_rows.reseal_all(plane, reseal))
    return KeyRotation(resealed=count, key_id=key_id(plane.secret_box.key()))
