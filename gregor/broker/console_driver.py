"""The web console inside a node (`console.listener`, off by default; `console.read.only`,
true by default): the same app as `gregor console`, served on the node's event loop (its
client calls on the console's own threads) and pointed at one of the node's own client
listeners, as any client of it. For development: a console for production runs as its own
process.

On a listener with SASL (SASL_PLAINTEXT, SASL_SSL) the console has no credentials of its own:
each browser user signs in with theirs (as `gregor console --login`), so the cluster's ACLs
decide what each sees. On a TLS listener (SSL, SASL_SSL) its clients trust the listener's own
truststore (`ssl.truststore.location` or `ssl.truststore.certificates`; else the system's
CAs). A listener with `ssl.client.auth=required` wants a client certificate: the console
presents the node's own, the listener's keystore (`ssl.keystore.location`, or
`ssl.keystore.certificate.chain` with `ssl.keystore.key`; `ssl.key.password`), as the node's
inter-broker client does.
"""

from __future__ import annotations

import logging
from typing import Any

from gregor.broker.config import BrokerConfig
from gregor.security.listener_config import ListenerConfig

log = logging.getLogger("gregor.broker")


def console_client(listener: ListenerConfig) -> tuple[dict[str, str], bool, str | None]:
    """The console's client settings for `listener` (librdkafka's names), whether each user
    signs in, and a warning when it cannot connect at all (pure)."""
    settings = {"security.protocol": listener.protocol}
    warning = None
    if listener.uses_tls:
        location = listener.get("ssl.truststore.location")
        inline = listener.get("ssl.truststore.certificates")
        if location:
            settings["ssl.ca.location"] = location
        elif inline:
            settings["ssl.ca.pem"] = inline
        if listener.get("ssl.client.auth", default="none").lower() == "required":
            certificate = _client_certificate(listener)
            if certificate:
                settings.update(certificate)
            else:
                warning = (
                    f"the console has no client certificate for listener {listener.name} "
                    "(ssl.client.auth=required, and the listener has no keystore): give the "
                    "node a PLAINTEXT or SASL listener, or run `gregor console --command-config`"
                )
    return settings, listener.uses_sasl, warning


def _client_certificate(listener: ListenerConfig) -> dict[str, str]:
    """The listener's keystore as librdkafka's client certificate settings (none without a
    keystore): a PEM file holds the chain and the key, so it is both locations."""
    location = listener.get("ssl.keystore.location")
    chain = listener.get("ssl.keystore.certificate.chain")
    key = listener.get("ssl.keystore.key")
    if location:
        out = {"ssl.certificate.location": location, "ssl.key.location": location}
    elif chain and key:
        out = {"ssl.certificate.pem": _pem(chain), "ssl.key.pem": _pem(key)}
    else:
        return {}
    password = listener.get("ssl.key.password")
    if password:
        out["ssl.key.password"] = password
    return out


def _pem(text: str) -> str:
    """Inline PEM may carry its line breaks as literal `\\n` (as Kafka's docs show it)."""
    return text.replace("\\n", "\n").strip()


class ConsoleDriver:
    def __init__(self, host: str, port: int, read_only: bool) -> None:
        self.host, self.port, self.read_only = host, port, read_only
        self.server: Any = None  # a ConsoleServer once started

    async def start(self, bootstrap: str, listener: ListenerConfig) -> None:
        """Listen (an OSError when the port cannot be bound stops the node's start) and serve
        a console of the node at `bootstrap`, a listener secured as `listener` says. Imported
        here: a node without a console does not load the web stack."""
        from gregor.console.server import ConsoleServer, bind
        from gregor.console.settings import ConsoleSettings

        client_config, login, warning = console_client(listener)
        if warning is not None:
            log.warning("%s", warning)
        settings = ConsoleSettings(
            bootstrap, client_config=client_config, read_only=self.read_only, login=login
        )
        self.server = ConsoleServer(settings, bind(self.host, self.port), own_signals=False)
        await self.server.start()
        mode = "read-only" if self.read_only else "writes allowed"
        signing = "; each user signs in with SASL credentials" if login else ""
        log.info("console on %s (%s)%s", self.server.url, mode, signing)

    async def stop(self) -> None:
        if self.server is not None:
            await self.server.stop()
            self.server = None


def console_driver(config: BrokerConfig) -> ConsoleDriver | None:
    """The node's console, or None when `console.listener` is empty."""
    where = config.console_listener()
    if where is None:
        return None
    return ConsoleDriver(*where, config.get_bool("console.read.only"))
