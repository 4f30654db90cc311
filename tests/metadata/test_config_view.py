"""A broker's view of its configs: a topic's storage settings and min.insync.replicas are kept
resolved per set of topic overrides, and a change of a dynamic broker config (a new mapping in
the metadata image) or of the topic's overrides is seen at once."""

from __future__ import annotations

import dataclasses
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


def test_a_broker_config_is_parsed_once_and_every_change_is_seen(monkeypatch) -> None:
    """A typed broker config is kept while the dynamic and static mappings are the same; a new
    mapping (an AlterConfigs at either level) or another static config is seen at once; a list
    is parsed for every caller (each may change its own)."""
    from gregor.metadata import config_defs

    parsed: list[str] = []
    real = config_defs.ConfigDef.parse
    monkeypatch.setattr(
        config_defs.ConfigDef, "parse", lambda d, raw: (parsed.append(d.name), real(d, raw))[1]
    )
    store = Store()
    rate = "leader.replication.throttled.rate"
    view = BrokerConfigView(store, 1, {"num.io.threads": "3"})
    assert [view.value(rate) for _ in range(3)] == [config_defs.LONG_MAX] * 3
    assert view.value("num.io.threads") == 3 and view.value("num.io.threads") == 3
    assert parsed == [rate, "num.io.threads"]

    store.default = MappingProxyType({rate: "1000"})  # cluster-wide
    assert view.value(rate) == 1000 and view.value(rate) == 1000
    store.node = MappingProxyType({rate: "500"})  # this broker's own
    assert view.value(rate) == 500
    store.node = MappingProxyType({})  # deleted: the cluster-wide one again
    assert view.value(rate) == 1000
    view.static = {"num.io.threads": "5"}
    assert view.value("num.io.threads") == 5
    assert parsed == [rate, "num.io.threads", rate, rate, rate, "num.io.threads"]

    policy = view.value("log.cleanup.policy")
    policy.append("changed by its caller")
    assert view.value("log.cleanup.policy") == ["delete"]


def test_the_raft_store_gives_one_dynamic_view_per_image_and_node() -> None:
    """The metadata store's dynamic configs are made once per image and node id: a new image
    (a committed AlterConfigs) gives new ones."""
    from gregor.metadata.image import EMPTY_IMAGE
    from gregor.metadata.raft_store import BROKER_RESOURCE, RaftMetadataStore

    store = RaftMetadataStore.__new__(RaftMetadataStore)
    store.image, store._dynamic = EMPTY_IMAGE, None
    first = store.dynamic(1)
    assert store.dynamic(1) is first and store.dynamic(2) is not first
    assert store.dynamic(1).get("a") is None
    store.image = dataclasses.replace(EMPTY_IMAGE, configs={(BROKER_RESOURCE, "1"): {"a": "b"}})
    assert store.dynamic(1).get("a") == "b"
