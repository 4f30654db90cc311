"""The source connector's topic work for one flow A->B, as I/O around `source.plan_topics` and
`source.target_configs`: list A's topics the flow mirrors, create their remote topics on B with
A's partition count, `replication.factor` (capped to B's broker count, said in a log line) and
the synced configs, grow remote topics when A's grow, every
`sync.topic.configs.interval.seconds` bring B's configs up to date, and every
`sync.topic.acls.interval.seconds` give the remote topics A's literal topic ACLs
(`source.target_acl` says which and how). ACL sync stops, said once in the log, when either cluster has no authorizer.
"""

from __future__ import annotations

import logging

from confluent_kafka import KafkaException
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    AlterConfigOpType,
    ConfigResource,
    NewPartitions,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)
from confluent_kafka.admin import (
    ConfigEntry as AdminConfigEntry,
)

from gregor.mirror import clients
from gregor.mirror.config import Flow
from gregor.mirror.source import TopicAcl, plan_topics, target_acl, target_configs

log = logging.getLogger("gregor.mirror")


class TopicSync:
    """Keeps flow A->B's remote topics on B in step with A's topics."""

    def __init__(self, flow: Flow, source_admin: AdminClient, target_admin: AdminClient):
        self.flow = flow
        self.source_admin = source_admin
        self.target_admin = target_admin
        self.target_partitions: dict[str, int] = {}  # remote topic -> partitions on B
        self.acls_synced: set[TopicAcl] = set()  # created on B already (never created twice)
        self.acl_sync_off = False  # a cluster without an authorizer: not tried again

    def source_topics(self) -> dict[str, int]:
        """A's topics this flow mirrors, with their partition counts."""
        return {
            t: n
            for t, n in clients.topic_partitions(self.source_admin).items()
            if self.flow.should_replicate_topic(t)
        }

    def refresh(self) -> dict[str, int]:
        """Create and grow remote topics; the source topics whose remote topic is ready."""
        source = self.source_topics()
        target = clients.topic_partitions(self.target_admin)
        plan = plan_topics(source, target, self.flow.policy, self.flow.source)
        if plan.create:
            self._create(plan.create, {self.flow.remote_topic(t): t for t in source})
        if plan.grow:
            self._grow(plan.grow)
        if plan.create or plan.grow:
            target = clients.topic_partitions(self.target_admin)
        self.target_partitions = {
            remote: target[remote]
            for remote in (self.flow.remote_topic(t) for t in source)
            if remote in target
        }
        return {
            t: n for t, n in source.items() if self.flow.remote_topic(t) in self.target_partitions
        }

    def _create(self, create: dict[str, int], upstream: dict[str, str]) -> None:
        flow = self.flow
        factor = clients.capped_replication_factor(
            flow.get("replication.factor"),
            clients.broker_count(self.target_admin),
            f"{flow.name} remote topics",
            flow.target,
        )
        new = []
        for remote, count in sorted(create.items()):
            configs: dict[str, str] = {}
            if flow.get("sync.topic.configs.enabled"):
                entries = clients.topic_configs(self.source_admin, upstream[remote])
                configs = {
                    name: value or ""
                    for name, value, _ in target_configs(
                        entries, flow.config_property_filter, incremental=False
                    )
                }
            new.append(NewTopic(remote, count, factor, config=configs))
        for remote, future in self.target_admin.create_topics(new).items():
            try:
                future.result(timeout=clients.ADMIN_TIMEOUT_S)
                log.info("%s: created %s on %s", flow.name, remote, flow.target)
            except KafkaException as e:
                if e.args[0].name() != "TOPIC_ALREADY_EXISTS":
                    raise

    def _grow(self, grow: dict[str, int]) -> None:
        new = [NewPartitions(remote, count) for remote, count in sorted(grow.items())]
        for remote, future in self.target_admin.create_partitions(new).items():
            try:
                future.result(timeout=clients.ADMIN_TIMEOUT_S)
                log.info(
                    "%s: %s grown to %d partitions on %s",
                    self.flow.name,
                    remote,
                    grow[remote],
                    self.flow.target,
                )
            except KafkaException as e:
                if e.args[0].name() != "INVALID_PARTITIONS":  # grown meanwhile by another mirror
                    raise

    def sync_configs(self, source_topics: list[str]) -> None:
        """Set on B what is set on A, and delete on B what is a default on A (MirrorMaker's
        incremental config sync)."""
        if not self.flow.get("sync.topic.configs.enabled"):
            return
        resources = []
        for topic in source_topics:
            entries = clients.topic_configs(self.source_admin, topic)
            changes = target_configs(entries, self.flow.config_property_filter, incremental=True)
            ops = [
                AdminConfigEntry(
                    name,
                    value,
                    incremental_operation=AlterConfigOpType.DELETE
                    if op == "DELETE"
                    else AlterConfigOpType.SET,
                )
                for name, value, op in changes
            ]
            if ops:
                resources.append(
                    ConfigResource("topic", self.flow.remote_topic(topic), incremental_configs=ops)
                )
        if not resources:
            return
        for resource, future in self.target_admin.incremental_alter_configs(resources).items():
            try:
                future.result(timeout=clients.ADMIN_TIMEOUT_S)
            except KafkaException as e:
                log.warning(
                    "%s: configs of %s not synced: %s",
                    self.flow.name,
                    resource.name,
                    clients.describe(e),
                )

    def sync_acls(self) -> None:
        """Give B's remote topics A's topic ACLs (MirrorMaker 2's `sync.topic.acls.enabled`)."""
        if self.acl_sync_off or not self.flow.get("sync.topic.acls.enabled"):
            return
        any_topic = AclBindingFilter(
            ResourceType.TOPIC, None, ResourcePatternType.ANY, None, None,  # type: ignore[arg-type]
            AclOperation.ANY, AclPermissionType.ANY,
        )  # fmt: skip
        try:
            bindings = self.source_admin.describe_acls(any_topic).result(clients.ADMIN_TIMEOUT_S)
        except KafkaException as e:
            self._acl_sync_stops(self.flow.source, e)
            return
        wanted: dict[TopicAcl, None] = {}
        for binding in bindings:
            if binding.resource_pattern_type != ResourcePatternType.LITERAL:
                continue  # as MirrorMaker 2: prefixed ACLs stay behind
            if not self.flow.should_replicate_topic(binding.name):
                continue
            acl = target_acl(_topic_acl(binding), self.flow.policy, self.flow.source)
            if acl is not None:
                wanted[acl] = None
        new = [acl for acl in wanted if acl not in self.acls_synced]
        if not new:
            return
        try:
            futures = self.target_admin.create_acls([_binding(acl) for acl in new])
            for future in futures.values():
                future.result(clients.ADMIN_TIMEOUT_S)
        except KafkaException as e:
            self._acl_sync_stops(self.flow.target, e)
            return
        self.acls_synced.update(new)
        log.info("%s: %d topic ACLs synced to %s", self.flow.name, len(new), self.flow.target)

    def _acl_sync_stops(self, cluster: str, e: KafkaException) -> None:
        if e.args[0].name() == "SECURITY_DISABLED":
            self.acl_sync_off = True
            log.info("%s: %s has no authorizer: topic ACLs are not synced", self.flow.name, cluster)
        else:
            log.warning("%s: topic ACLs not synced: %s", self.flow.name, clients.describe(e))


def _topic_acl(b: AclBinding) -> TopicAcl:
    operation, permission = b.operation, b.permission_type  # enums in what describe_acls gives
    assert isinstance(operation, AclOperation) and isinstance(permission, AclPermissionType)
    return TopicAcl(b.name, b.principal, b.host, operation.name, permission.name)


def _binding(acl: TopicAcl) -> AclBinding:
    return AclBinding(
        ResourceType.TOPIC, acl.topic, ResourcePatternType.LITERAL, acl.principal,
        acl.host, AclOperation[acl.operation], AclPermissionType[acl.permission],
    )  # fmt: skip
