"""A node of a networked KRaft quorum (`controller.quorum.voters` or
`controller.quorum.bootstrap.servers` set): the Raft driver, and what runs on it by the node's
`process.roles` (Kafka splits this between KafkaRaftManager, ControllerServer/ControllerApis and
BrokerLifecycleManager).

    member = ClusterMember(1, store, controller, config.membership(), raft_log, quorum_state,
                           raft_config, clock=clock)
    member.serve_admin(services)   # a controller's admin writes, with the node's services
    member.lifecycle = ...    # a broker's (runtime/lifecycle.py), over member.controller_channel()
    await member.start()      # listen (controllers), join the quorum, register (brokers)
    await member.stop()       # a broker asks to be fenced, a leader resigns (EndQuorumEpoch)

The driver's committed entries go to the metadata store (replayed on every node, controllers,
brokers and observers alike) and its leader changes to the store and to the broker lifecycle.

A controller (`controller` among the roles) is a voter: its driver listens on the controller
listener, which serves, besides the Raft RPCs, what brokers ask the active controller
(BrokerRegistration, BrokerHeartbeat, AllocateProducerIds, AlterPartition: decided by
node/active_controller.py, driven by runtime/controller_driver.py, which also runs its tick)
and the admin writes brokers forward (controller_apis.py; node/forwarding.py is the brokers'
side).

A broker-only node (`process.roles=broker`) is an observer: no listener, it fetches the log
from the leader it finds through the voters or the bootstrap servers (raft_driver.py).

A broker (a combined node, or a broker-only one) registers and heartbeats with the active
controller and fetches producer-id blocks ahead (its `lifecycle`: node/lifecycle.py, driven by
runtime/lifecycle.py), through a ControllerChannel that finds the leader and where it listens.
"""

from __future__ import annotations

import logging
import operator
from dataclasses import replace

from gregor.broker.config import BrokerConfig, Membership
from gregor.broker.controller_apis import admin_handlers
from gregor.broker.controller_authorization import ClusterActionGate
from gregor.broker.listener_security import ListenerSecurity, NodeSecurity
from gregor.clock import Clock
from gregor.controller.local import LocalController
from gregor.handlers.context import Services
from gregor.metadata.config_view import BrokerConfigView
from gregor.metadata.raft_store import RaftMetadataStore
from gregor.node.active_controller import ActiveControllerCore
from gregor.raft.config import RaftConfig
from gregor.raft.log import RaftLog
from gregor.raft.node import LeaderAndEpoch
from gregor.raft.store import QuorumStateStore
from gregor.runtime.connection import Dispatcher
from gregor.runtime.connection_quotas import ConnectionQuotas, connection_limits
from gregor.runtime.controller_channel import ControllerChannel
from gregor.runtime.controller_driver import ControllerDriver
from gregor.runtime.lifecycle import BrokerLifecycle
from gregor.runtime.raft_driver import RaftDriver
from gregor.runtime.server import rate_window, reconfigure_servers

log = logging.getLogger("gregor.cluster")


def controller_connections(
    view: BrokerConfigView | None, listener: ListenerSecurity | None
) -> ConnectionQuotas | None:
    """The controller listener's own connection counts. Kafka's controller serves on a socket
    server of its own: `max.connections` (and the creation rate, the per-IP limits) bind its
    connections apart from the client listeners', with
    `listener.name.<controller listener>.max.connections` (and `.max.connection.creation.rate`)
    its own limits. None on a node without a controller listener."""
    if view is None or listener is None:
        return None
    limits = connection_limits(view.value, [listener.config.name], view.raw)
    return ConnectionQuotas(limits, None, rate_window(view.value))


def networked_controller(
    store: RaftMetadataStore, node_id: int, config: BrokerConfig
) -> LocalController:
    """The controller of a node in a networked quorum (it writes only while active), with the
    configured broker session timeout."""
    controller = LocalController(store, node_id, config.values)
    session_ms = config.get_int("broker.session.timeout.ms")
    controller.config = replace(controller.config, broker_session_timeout_ms=session_ms)
    controller.quorum.config = controller.config
    return controller


class ClusterMember:
    def __init__(
        self,
        node_id: int,
        store: RaftMetadataStore,
        controller: LocalController,
        membership: Membership,
        raft_log: RaftLog,
        quorum_state: QuorumStateStore,
        raft_config: RaftConfig,
        *,
        clock: Clock,
        security: NodeSecurity | None = None,
        config_view: BrokerConfigView | None = None,
    ) -> None:
        """A controller's admin handlers come with `serve_admin`, a broker's `lifecycle` is
        set; both before `start`. `config_view`: the node's configs, for the controller
        listener's connection limits (`reconfigure_connections` when they change)."""
        self.node_id = node_id
        self.store = store
        self.controller = controller
        self.membership = membership
        self.security = security
        listener = security.controller_listener if security is not None else None
        assert listener is not None or security is None or not membership.is_controller
        self.voters = dict(membership.voters or {})
        self.config_view = config_view
        self.connections = controller_connections(config_view, listener)
        # (the server, the two dynamic broker config mappings) the limits were last set for
        self._limits_for: tuple[object, object, object] | None = None
        if self.connections is not None:  # the `ip` client quotas' connection rates
            self.connections.ip_quotas_of = lambda: store.image.client_quotas
        core = ActiveControllerCore(node_id, store, controller, duties=membership.is_controller)
        self.controller_driver = ControllerDriver(core, clock)
        self.driver = RaftDriver(
            node_id,
            raft_log,
            quorum_state,
            config=raft_config,
            cluster_id=self.store.cluster_id,
            on_commit=self.store.on_committed,
            on_snapshot=self.store.on_snapshot,
            on_leader_change=self._on_leader_change,
            clock=clock.now_ms,  # wall clock: DescribeQuorum reports fetch times in it
            handlers=self.controller_driver.handlers(),
            tls=listener.tls if listener is not None else None,
            on_secure=listener.on_secure if listener is not None else None,
            wrap=listener.wrap if listener is not None else None,
            client_security=security.to_controllers if security is not None else None,
            quotas=self.connections,
            listener=listener.config.name if listener is not None else "",
        )
        self.store.attach(self.driver)
        self.lifecycle: BrokerLifecycle | None = None  # a broker's, set before start

    def reconfigure_connections(self) -> None:
        """Dynamic configs may have changed: the controller listener's connection limits. A
        controller-only node asks after every commit; the limits are worked out again only when
        the dynamic broker configs did change (the image replaces their mappings then, never
        edits them), not for every topic created."""
        server = self.driver.server
        if self.connections is None or self.config_view is None or server is None:
            return
        dynamic = self.store.dynamic(self.node_id)
        seen = (server, dynamic.default, dynamic.node)
        if self._limits_for is not None and all(map(operator.is_, seen, self._limits_for)):
            return
        self._limits_for = seen
        view = self.config_view
        limits = connection_limits(view.value, [self.driver.listener], view.raw)
        reconfigure_servers(self.connections, [server], limits)

    def controller_channel(
        self, client_id: str, request_timeout_ms: int = 5000
    ) -> ControllerChannel:
        """A channel of its own to the active controller, found through this node's quorum."""
        return ControllerChannel(
            self.store,
            self.driver.endpoint,
            client_id=client_id,
            request_timeout_ms=request_timeout_ms,
            security=self.security.to_controllers if self.security is not None else None,
        )

    def serve_admin(self, services: Services) -> None:
        """On a controller, serve the admin writes (and the Envelopes brokers forward them in)
        on the controller listener, with the node's services; with an authorizer, what only
        nodes send there needs CLUSTER_ACTION (controller_authorization.py)."""
        if not self.membership.is_controller:
            return
        self.driver.handlers.update(admin_handlers(services))
        authorizer = services.authorizer
        if authorizer is not None:
            outer = self.driver.wrap

            def wrap(dispatch: Dispatcher) -> Dispatcher:
                gated = ClusterActionGate(dispatch, authorizer.authorize)
                return outer(gated) if outer is not None else gated

            self.driver.wrap = wrap

    # -- lifecycle ----------------------------------------------------------------------------

    async def start(self) -> None:
        listen = self.membership.controller_listener
        if listen is not None:  # a voter; an observer only makes requests
            await self.driver.bind(*listen)
        await self.driver.start(self.voters, self.membership.bootstrap)
        self.controller_driver.start()
        if self.lifecycle is not None:
            self.lifecycle.start()

    async def stop(self) -> None:
        if self.lifecycle is not None:
            await self.lifecycle.stop()  # asks to be fenced first
        await self.controller_driver.stop()
        await self.driver.stop(resign=True)

    async def leave(self) -> None:
        """A stopping broker's controlled shutdown, then fencing (node/lifecycle.py)."""
        if self.lifecycle is not None:
            await self.lifecycle.leave()

    @property
    def broker_epoch(self) -> int:
        """This broker's epoch (-1: not registered, or no broker here)."""
        return -1 if self.lifecycle is None else self.lifecycle.broker_epoch

    def _on_leader_change(self, change: LeaderAndEpoch) -> None:
        self.store.on_leader_change(change)
        self.controller_driver.core.on_leader_change(change.leader_id)
        if self.lifecycle is not None:
            self.lifecycle.on_leader_change()

    def allocate_producer_ids(self, count: int) -> int:
        """A producer-id block fetched ahead from the active controller (node/lifecycle.py)."""
        if self.lifecycle is None:
            raise ValueError(f"node {self.node_id} is no broker: it hands out no producer ids")
        return self.lifecycle.allocate_producer_ids(count)
