"""Times the admin types (``token issue --expires``, ``audit --since``) and the CA file the
client trusts (``XPUPOOL_CA``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from xpupool.client._config import resolve_config
from xpupool.client._times import duration_s, expiry, since, timestamp
from xpupool.model.errors import RequestError


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("90s", 90), ("30m", 1800), ("12h", 43200), ("7d", 604800), ("2w", 1209600), ("1.5h", 5400)],
)
def test_durations(text: str, seconds: float) -> None:
    assert duration_s(text) == seconds


def test_times_and_what_is_neither() -> None:
    assert timestamp("1970-01-02T00:00:00Z") == 86400
    assert timestamp("1970-01-02T00:00:00") == 86400  # no zone: UTC
    assert timestamp("1970-01-02T02:00:00+02:00") == 86400
    assert duration_s("soon") is None and timestamp("soon") is None
    assert duration_s("5") is None  # a bare number is ambiguous: refused


def test_expiry_sends_durations_as_is_and_times_as_times() -> None:
    assert expiry("--expires", "1h") == {"expires_in_s": 3600}
    assert expiry("--expires", "2030-01-01T00:00:00Z") == {"expires_at": 1893456000}
    with pytest.raises(RequestError) as exc:
        expiry("--expires", "tomorrow")
    assert exc.value.field == "--expires"
    with pytest.raises(RequestError):
        expiry("--expires", "0s")


def test_since_counts_back_from_now() -> None:
    assert since("--since", "1h", now=10_000) == 6400
    assert since("--since", "1970-01-01T00:01:00Z", now=10_000) == 60


def test_the_ca_comes_from_xpupool_ca_or_the_config_file(tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\n")
    env = {"XPUPOOL_CA": str(ca), "XPUPOOL_TOKEN": "t"}
    assert resolve_config(None, None, env, tmp_path, tmp_path).ca == str(ca)
    config = tmp_path / "config.yaml"
    config.write_text("url: https://pool:8443\nca: ca.pem\n")
    found = resolve_config(None, "t", {"XPUPOOL_CONFIG": str(config)}, tmp_path, tmp_path)
    assert found.ca == str(ca) and found.url == "https://pool:8443"
    with pytest.raises(RequestError) as exc:
        resolve_config(None, "t", {"XPUPOOL_CA": str(tmp_path / "nope")}, tmp_path, tmp_path)
    assert exc.value.field == "XPUPOOL_CA"
    assert resolve_config(None, "t", {}, tmp_path, tmp_path).ca is None
