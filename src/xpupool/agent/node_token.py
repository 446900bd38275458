"""The node's own token, kept in the agent's work dir after a bootstrap exchange.

Given a bootstrap token (prefix ``xpb_``), a standalone agent registers its node once; the reply
carries the node's own token, which is written here (mode 0600, replaced atomically) and used from
then on, also after a restart: the spent bootstrap token may stay in the agent's configuration. A
token that is not a bootstrap token is used as given, whatever this file holds.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from xpupool.model.errors import RequestError
from xpupool.server.schemas.agent_protocol import BOOTSTRAP_TOKEN_PREFIX

NODE_TOKEN_FILE = "node-token"
log = logging.getLogger("xpupool.agent")


def is_bootstrap(token: str) -> bool:
    return token.startswith(BOOTSTRAP_TOKEN_PREFIX)


class NodeTokenFile:
    def __init__(self, path: Path) -> None:
        self.path = path

    def load(self) -> str | None:
        """The stored token; None when there is none (or it is empty); a file that is there but
        cannot be read is a :class:`RequestError` naming it."""
        try:
            text = self.path.read_text().strip()
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as exc:
            raise RequestError(str(self.path), None, f"cannot read: {exc.strerror}") from None
        return text or None

    def choose(self, given: str) -> tuple[str, str | None]:
        """The token to speak with and a line saying why, when that is not obvious."""
        if not is_bootstrap(given):
            return given, None
        stored = self.load()
        if stored is not None:
            return stored, f"using the node token stored in {self.path} (bootstrap done before)"
        return given, f"bootstrap token: the node's own token will be stored in {self.path}"

    def save(self, token: str) -> None:
        """Write ``token`` (0600, atomically). A failure is logged, not raised: the agent goes
        on with the token in memory, and only a restart would need a new token from the admin."""
        tmp = self.path.with_name(f".{self.path.name}.tmp")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(token + "\n")
            os.chmod(tmp, 0o600)
            os.replace(tmp, self.path)
        except OSError as exc:
            log.error(
                "cannot store the node token in %s (%s): it is kept in memory only; after a "
                "restart the admin must issue a token for this node (token issue --agent --node)",
                self.path,
                exc.strerror or exc,
            )
            return
        log.info("node token stored in %s", self.path)
