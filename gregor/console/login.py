"""Signing in with SASL credentials (`gregor console --login`): each browser session gets
clients of its own, authenticated as the user who signed in, so the cluster's ACLs decide
what each one sees and may change. Without --login the console's clients use the settings of
--command-config for everyone.

A session is a random id in an HttpOnly, SameSite=Strict cookie, kept in memory (at most
MAX_SESSIONS, the least recently used dropped first; IDLE_S without a page ends one). The
password is handed to librdkafka and kept nowhere else. Credentials are checked by asking for
the cluster's metadata: a refused login is a 401 page, never a session.
"""

from __future__ import annotations

import dataclasses
import secrets
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from gregor.clock import SYSTEM_CLOCK, Clock
from gregor.console.cluster import Cluster
from gregor.console.errors import ConsoleError, Unavailable
from gregor.console.settings import ConsoleSettings

COOKIE = "gregor_console_session"
MAX_SESSIONS = 100
IDLE_S = 3600.0
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
_PROBE_S = 0.25


class Unauthorized(ConsoleError):
    status = 401


class SignInNeeded(ConsoleError):
    """No session (or an ended one): the page answers with a redirect to /login."""

    status = 303


@dataclass
class Session:
    user: str
    cluster: Cluster
    last_s: float


class Sessions:
    def __init__(self, now_s: Any = SYSTEM_CLOCK.monotonic_s) -> None:
        self._by_id: OrderedDict[str, Session] = OrderedDict()
        self._now_s = now_s

    def add(self, user: str, cluster: Cluster) -> tuple[str, list[Cluster]]:
        """A new session's id, and the clients of sessions it pushed out (to close)."""
        session_id = secrets.token_urlsafe(24)
        self._by_id[session_id] = Session(user, cluster, self._now_s())
        dropped = []
        while len(self._by_id) > MAX_SESSIONS:
            dropped.append(self._by_id.popitem(last=False)[1].cluster)
        return session_id, dropped

    def get(self, session_id: str | None) -> Session | None:
        session = self._by_id.get(session_id or "")
        if session is None:
            return None
        now = self._now_s()
        if now - session.last_s > IDLE_S:
            del self._by_id[session_id or ""]
            return None
        session.last_s = now
        self._by_id.move_to_end(session_id or "")
        return session

    def remove(self, session_id: str | None) -> Cluster | None:
        session = self._by_id.pop(session_id or "", None)
        return session.cluster if session is not None else None

    def all(self) -> list[Cluster]:
        return [s.cluster for s in self._by_id.values()]


def sign_in(
    settings: ConsoleSettings,
    user: str,
    password: str,
    mechanism: str,
    clock: Clock = SYSTEM_CLOCK,
) -> Cluster:
    """Clients authenticated as `user`, once the cluster has accepted the credentials."""
    if not user or not password:
        raise Unauthorized("a user name and a password, please")
    if mechanism not in MECHANISMS:
        raise Unauthorized(f"the mechanism is one of {', '.join(MECHANISMS)}")
    protocol = str(settings.client_config.get("security.protocol", "SASL_PLAINTEXT")).upper()
    if not protocol.startswith("SASL_"):
        protocol = "SASL_PLAINTEXT"
    config = {
        **settings.client_config,
        "security.protocol": protocol,
        "sasl.mechanism": mechanism,
        "sasl.username": user,
        "sasl.password": password,
    }
    cluster = Cluster(dataclasses.replace(settings, client_config=config))
    deadline = clock.monotonic_s() + settings.request_timeout_s
    while True:
        try:
            cluster.admin.list_topics(timeout=_PROBE_S)
            return cluster
        except Exception:  # noqa: BLE001 - the error callback says why
            cluster.admin.poll(0)
        if cluster.auth_error is not None:
            raise Unauthorized(f"the cluster refused the login: {cluster.auth_error}")
        if clock.monotonic_s() >= deadline:
            raise Unavailable(
                f"no answer from {settings.bootstrap} in {settings.request_timeout_s:g} s"
            )
