"""A broker's view of its configs: a topic's storage settings and min.insync.replicas are kept
resolved per set of topic overrides, and a change of a dynamic broker config (a new mapping in
the metadata image) or of the topic's overrides is seen at once."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from types import MappingProxyType

from gregor.metadata.config_defs import DynamicConfigs
from gregor.metadata.config_view import BrokerConfigView
from gregor.metadata.store import TopicInfo


class Store:
    def __init__(self) -> None:
        self.topics: dict[str, TopicInfo] = {}
        self.default: Mapping[str, str] = MappingProxyType({})
        self.node: Mapping[str, str] = MappingProxyType({})

    def dynamic(self, node_id: int) -> DynamicConfigs:
        return DynamicConfigs(self.default, self.node)

    def add(self, name: str, configs: dict[str, str]) -> TopicInfo:
        info = self.topics[name] = TopicInfo(name, uuid.uuid4(), [[1]], configs)
        return info


def test_resolved_settings_are_kept_and_every_change_is_seen() -> None:
    store = Store()
    view = BrokerConfigView(store, 1, {"log.segment.bytes": "2048", "min.insync.replicas": "2"})
    a = store.add("a", {})
    b = store.add("b", {})
    c = store.add("c", {"segment.bytes": "4096", "min.insync.replicas": "3"})
    assert view.log_config_for("a") is view.log_config_for("b")
    assert view.log_config_for("a").segment_bytes == 2048
    assert (view.min_insync_replicas(a), view.min_insync_replicas(b)) == (2, 2)
    assert view.log_config_for("c").segment_bytes == 4096 and view.min_insync_replicas(c) == 3
    assert view.log_config_for("unknown").segment_bytes == 2048

    store.default = MappingProxyType({"log.segment.bytes": "8192"})  # cluster-wide AlterConfigs
    assert view.log_config_for("a").segment_bytes == 8192
    assert view.log_config_for("c").segment_bytes == 4096
    store.node = MappingProxyType({"log.segment.bytes": "16384", "min.insync.replicas": "1"})
    assert view.log_config_for("b").segment_bytes == 16384 and view.min_insync_replicas(b) == 1

    c.configs = {"min.insync.replicas": "2"}  # the topic's overrides changed
    assert view.min_insync_replicas(c) == 2 and view.log_config_for("c").segment_bytes == 16384


def test_a_plain_mapping_of_dynamic_configs_is_resolved_every_time() -> None:
    dynamic: dict[str, str] = {}

    class Plain(Store):
        def dynamic(self, node_id: int) -> dict[str, str]:  # type: ignore[override]
            return dynamic

    store = Plain()
    view = BrokerConfigView(store, 1, {})
    a = store.add("a", {})
    assert view.min_insync_replicas(a) == 1
    dynamic["min.insync.replicas"] = "2"  # edited in place: seen all the same
    assert view.min_insync_replicas(a) == 2
