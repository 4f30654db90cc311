"""A broker's metadata: its log dirs' `meta.properties`, the metadata log
(`__cluster_metadata-0` in the first log dir) and the controller over it.

    node = open_metadata(config, membership, clock, endpoints)   # the advertised client listeners
    node.store, node.controller, node.member      # member: None for a one-voter quorum

Alone (no `controller.quorum.voters`), the node is the only voter of its own quorum: it leads
at once, replays the log, and commits its own registration (bootstrapping a new log, migrating
a pre-KRaft `__cluster_metadata.json`: controller/local.py). In a quorum a combined node votes
and a broker-only node observes; either forwards admin writes while it is not the active
controller (cluster_member.py).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

from gregor.broker.cluster_member import ClusterMember, networked_controller
from gregor.broker.config import BrokerConfig, Membership
from gregor.broker.listener_security import node_security
from gregor.clock import Clock
from gregor.controller.local import LocalController
from gregor.controller.quorum_controller import Listener
from gregor.metadata import meta_properties
from gregor.metadata.config_view import BrokerConfigView
from gregor.metadata.image import Endpoint
from gregor.metadata.raft_store import MetadataLogError, RaftMetadataStore
from gregor.metadata.store import MetadataStore
from gregor.runtime.process import halt_on_metadata_log_failure


@dataclass
class MetadataNode:
    store: RaftMetadataStore
    controller: LocalController
    member: ClusterMember | None
    meta_properties: dict[str, meta_properties.MetaProperties]


def open_metadata(
    config: BrokerConfig, membership: Membership, clock: Clock, endpoints: Sequence[Endpoint]
) -> MetadataNode:
    node_id, data_dirs = config.node_id, config.log_dirs
    for d in data_dirs:
        os.makedirs(d, exist_ok=True)
    legacy = MetadataStore.load(data_dirs[0])  # a data dir from before the KRaft log
    props = meta_properties.ensure(
        data_dirs,
        node_id,
        config.get_str("cluster.id"),
        legacy.cluster_id if legacy else None,
        joins_quorum=config.joins_quorum(),
    )
    cluster_id = props[data_dirs[0]].cluster_id
    member: ClusterMember | None = None
    if not membership.networked:  # the only voter of its own quorum
        store = RaftMetadataStore.open(
            data_dirs[0], node_id, cluster_id, clock=clock, configs=config.values
        )
        controller = LocalController(store, node_id, config.values)
        dirs = [m.directory_id for m in props.values() if m.directory_id is not None]
        controller.start(
            [Listener(e.name, e.host, e.port, e.security_protocol) for e in endpoints],
            dirs,
            config.get_str("broker.rack"),
            legacy,
            clock.now_ms(),
        )
    else:
        if legacy is not None:
            raise MetadataLogError(
                f"{legacy.path}: a pre-KRaft store cannot be migrated into a quorum of "
                "several nodes; start this node alone (without controller.quorum.voters "
                "or controller.quorum.bootstrap.servers) once to migrate it"
            )
        store, controller, member = _join_quorum(config, membership, cluster_id, clock)
    store.on_log_failure(halt_on_metadata_log_failure(data_dirs[0]))
    return MetadataNode(store, controller, member, props)


def _join_quorum(
    config: BrokerConfig, membership: Membership, cluster_id: str, clock: Clock
) -> tuple[RaftMetadataStore, LocalController, ClusterMember]:
    """A combined node votes; a broker-only node observes the quorum (config.py has refused
    what cannot run)."""
    node_id = config.node_id
    voters = list(membership.voters or ())  # a broker-only node may know none
    store, raft_log, quorum_state, raft_config = RaftMetadataStore.open_networked(
        config.log_dirs[0], node_id, cluster_id, voters, clock=clock, configs=config.values
    )
    if membership.is_controller:
        controller = networked_controller(store, node_id, config)
    else:  # broker-only: never the active controller (its topics are made there)
        controller = LocalController(store, node_id, config.values)
    member = ClusterMember(
        node_id,
        store,
        controller,
        membership,
        raft_log,
        quorum_state,
        raft_config,
        clock=clock,
        security=node_security(config, membership),
        config_view=BrokerConfigView(store, node_id, config.values),
    )
    return store, controller, member
