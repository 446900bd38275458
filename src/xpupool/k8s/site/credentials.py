"""A Kubernetes site's credentials: the kubeconfig the sites file names (a file, in-cluster, or
``kubeconfig_secret``: the admin's own secret in the plane's encrypted secret store, issue 49).

A secret's kubeconfig is read as the site is attached (the store is open then), and again each
time the admin sets that secret (``Sites.secret_changed``): the site then watches and acts with
the new credentials without a restart (``KubernetesSite._rotate``). Only the admin can set it:
tenants reach their own secrets alone (``server/services/secrets.py``). Its paths, if any (a
``certificate-authority`` file), are the plane's own files: embed the data instead
(``certificate-authority-data``, a ``token``) so that the secret holds the whole of it.

A secret missing, or not a kubeconfig (not YAML, no such context, a context with no user) is
refused with a :class:`RequestError` naming the site and the field, so ``xpupool up`` stops
before serving; at a rotation the site keeps what it had and logs the reason.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import yaml
from lightkube.config.kubeconfig import KubeConfig, SingleConfig
from lightkube.core.exceptions import ConfigError

from xpupool.k8s.informers.kubeconfig import load_config
from xpupool.k8s.site.sites_file import KubernetesSiteConfig
from xpupool.model.errors import NotFound, RequestError
from xpupool.server.secret_box import SealBrokenError
from xpupool.server.services.secrets import admin_secret

if TYPE_CHECKING:
    from xpupool.server.plane import ControlPlane

__all__ = ["Credentials", "parse_kubeconfig", "read_credentials"]

MAX_KUBECONFIG_BYTES = 1 << 20  # a kubeconfig with embedded certificates is a few KiB


@dataclass(frozen=True, slots=True)
class Credentials:
    """What the site connects with, and the secret's value it came from (None: not a secret),
    so that a secret set again to the same value changes nothing."""

    config: SingleConfig
    secret_value: bytes | None


def read_credentials(site: KubernetesSiteConfig, plane: ControlPlane) -> Credentials:
    """The site's credentials now. Raises :class:`RequestError` naming the site's field."""
    if site.kubeconfig_secret is None:
        return Credentials(load_config(site.kubeconfig, site.context), None)
    try:
        value = admin_secret(plane, site.kubeconfig_secret)
    except NotFound:
        why = "no such secret of the admin's (set it: xpupool secret set NAME, as the admin)"
        raise RequestError(_field(site), site.kubeconfig_secret, why) from None
    except SealBrokenError as exc:
        raise RequestError(_field(site), site.kubeconfig_secret, str(exc)) from None
    return Credentials(parse_kubeconfig(site, value), value)


def parse_kubeconfig(site: KubernetesSiteConfig, value: bytes) -> SingleConfig:
    """``value`` (a secret's) as a kubeconfig, at the site's ``context`` (default: its current
    one). Raises :class:`RequestError` naming the site's field and what is wrong."""
    if len(value) > MAX_KUBECONFIG_BYTES:
        raise _bad(site, f"{len(value)} bytes, more than a kubeconfig's {MAX_KUBECONFIG_BYTES}")
    try:
        data = yaml.safe_load(value.decode())
    except (UnicodeDecodeError, yaml.YAMLError) as exc:
        raise _bad(site, f"not YAML: {str(exc).splitlines()[0]}") from None
    if not isinstance(data, dict):
        raise _bad(site, "expected a kubeconfig object (clusters, contexts, users)")
    try:
        found = KubeConfig.from_dict(data).get(site.context)
    except ConfigError as exc:
        raise _bad(site, str(exc)) from None
    except (KeyError, TypeError, ValueError, AttributeError) as exc:  # a field of a wrong shape
        raise _bad(site, f"not a kubeconfig: {type(exc).__name__} {exc}") from None
    if found is None or found.user is None:
        raise _bad(site, "its context names no user")
    return found


def _field(site: KubernetesSiteConfig) -> str:
    return f"sites[{site.name}].kubeconfig_secret"


def _bad(site: KubernetesSiteConfig, why: str) -> RequestError:
    return RequestError(_field(site), site.kubeconfig_secret, why)
