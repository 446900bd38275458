"""The control plane's Python client and the CLI commands built on it.

Imports pydantic, httpx and ``server/schemas/`` only: never FastAPI or SQLAlchemy, so the CLI
starts fast on a laptop with no server stack (STYLE.md section 4; tests/unit/cli/test_imports.py).
"""

from xpupool.client._config import DEFAULT_URL, ClientConfig, resolve_config
from xpupool.client._errors import ApiError, Unreachable
from xpupool.client._http import Client

__all__ = ["DEFAULT_URL", "ApiError", "Client", "ClientConfig", "Unreachable", "resolve_config"]
