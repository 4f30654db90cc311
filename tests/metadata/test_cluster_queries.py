"""The cluster questions (metadata/cluster.py) as pure functions of an image."""

from __future__ import annotations

import random
import uuid

from gregor.metadata import cluster
from gregor.metadata.image import BrokerRegistration, Endpoint, MetadataImage


def reg(broker_id: int, *, fenced: bool = False, shutdown: bool = False) -> BrokerRegistration:
    return BrokerRegistration(
        broker_id,
        uuid.UUID(int=broker_id),
        100 + broker_id,
        (
            Endpoint("CLIENTS", f"c{broker_id}", 9000 + broker_id, 0),
            Endpoint("PLAINTEXT", f"p{broker_id}", 9100 + broker_id, 0),
        ),
        rack=f"r{broker_id}",
        fenced=fenced,
        in_controlled_shutdown=shutdown,
    )


IMAGE = MetadataImage(
    brokers={3: reg(3), 1: reg(1), 2: reg(2, fenced=True), 4: reg(4, shutdown=True)}
)


def test_clients_see_unfenced_brokers_at_the_listener_asked_for_in_id_order() -> None:
    assert cluster.client_brokers(IMAGE) == [
        (1, "p1", 9101, "r1"),
        (3, "p3", 9103, "r3"),
        (4, "p4", 9104, "r4"),
    ]
    assert [b.port for b in cluster.client_brokers(IMAGE, "CLIENTS")] == [9001, 9003, 9004]
    # no listener of that name: left out, as Kafka's getAliveBrokerNodes
    assert cluster.client_brokers(IMAGE, "OTHER") == []
    assert cluster.lacking_listener(IMAGE, "OTHER") == [1, 3, 4]
    # asked on no client listener (the controller listener): PLAINTEXT, else the first
    assert [b.host for b in cluster.client_brokers(IMAGE, None)] == ["p1", "p3", "p4"]
    assert cluster.active_broker_ids(IMAGE) == [1, 3, 4]


def test_describe_cluster_v2_lists_fenced_brokers_when_asked() -> None:
    listed = cluster.client_brokers(IMAGE, include_fenced=True)
    assert [b.node_id for b in listed] == [1, 2, 3, 4]
    assert cluster.fenced_broker_ids(IMAGE) == {2}


def test_endpoints_liveness_and_epochs() -> None:
    assert cluster.broker_endpoint(IMAGE, 3) == ("p3", 9103)
    assert cluster.broker_endpoint(IMAGE, 3, "CLIENTS") == ("c3", 9003)
    assert cluster.broker_endpoint(IMAGE, 9) is None
    assert cluster.broker_endpoint(IMAGE, 3, "OTHER") is None
    assert cluster.alive_broker_endpoint(IMAGE, 3, "CLIENTS") == ("c3", 9003)
    assert cluster.alive_broker_endpoint(IMAGE, 2, "CLIENTS") is None  # fenced
    assert cluster.liveness(IMAGE, 1) == cluster.BrokerLiveness(101, True)
    assert cluster.liveness(IMAGE, 2) == cluster.BrokerLiveness(102, False)  # fenced
    assert cluster.liveness(IMAGE, 4) == cluster.BrokerLiveness(104, False)  # shutting down
    assert cluster.liveness(IMAGE, 9) == cluster.BrokerLiveness(-1, False)
    assert cluster.registered_epoch(IMAGE, 3) == 103
    assert cluster.registered_epoch(IMAGE, 9) == -1


def test_the_controller_named_is_the_broker_asked_when_listed() -> None:
    rng = random.Random(7)
    assert cluster.controller_id([1, 3, 4], 3, rng) == 3
    picks = {cluster.controller_id([1, 3, 4], 2, rng) for _ in range(50)}
    assert picks == {1, 3, 4}
    assert cluster.controller_id([], 2, rng) == -1


def test_the_controller_named_is_the_active_one_when_it_is_a_live_broker() -> None:
    """A combined node leading the quorum takes admin writes itself: no forwarding hop."""
    rng = random.Random(7)
    assert cluster.controller_id([1, 3, 4], 3, rng, active=4) == 4
    assert cluster.controller_id([1, 3, 4], 2, rng, active=1) == 1
    # a controller-only leader (not a broker clients reach): the broker asked, as before
    assert cluster.controller_id([1, 3, 4], 3, rng, active=9) == 3
    assert cluster.controller_id([1, 3, 4], 3, rng, active=None) == 3


class Store:
    def __init__(self, image: MetadataImage, leader_id: int | None = None) -> None:
        self.image = image
        self.leader_id = leader_id


def test_a_lone_node_lists_itself_and_a_quorum_member_the_image() -> None:
    alone = cluster.ClusterView(Store(IMAGE), 7, quorum=False, host="h", port=1, rack="x")
    assert alone.brokers() == [(7, "h", 1, "x")]
    assert alone.controller_id() == 7 and alone.active_broker_ids() == [7]
    member = cluster.ClusterView(Store(IMAGE), 3, quorum=True, host="h", port=1)
    assert [b.node_id for b in member.brokers()] == [1, 3, 4]
    assert member.controller_id() == 3
    led = cluster.ClusterView(Store(IMAGE, leader_id=1), 3, quorum=True, host="h", port=1)
    assert led.controller_id() == 1
    assert member.active_broker_ids() == [1, 3, 4]
    named = cluster.ClusterView(
        Store(IMAGE), 3, quorum=True, host="h", port=1, inter_broker_listener="CLIENTS"
    )
    assert named.broker_endpoint(1) == ("c1", 9001)
    assert member.broker_endpoint(1) == ("p1", 9101)


def test_answers_name_brokers_at_the_listener_asked_on(caplog) -> None:
    own = (Endpoint("INTERNAL", "i7", 1, 0), Endpoint("EXTERNAL", "e7", 2, 3))
    alone = cluster.ClusterView(Store(IMAGE), 7, quorum=False, endpoints=own)
    assert (alone.host, alone.port) == ("i7", 1)  # the first client listener
    assert alone.brokers("EXTERNAL") == [(7, "e7", 2, None)]
    assert alone.endpoint("EXTERNAL") == ("e7", 2) and alone.endpoint("OTHER") is None
    assert alone.alive_broker_endpoint(7, "INTERNAL") == ("i7", 1)
    member = cluster.ClusterView(Store(IMAGE), 3, quorum=True, endpoints=own)
    assert [b.port for b in member.brokers("CLIENTS")] == [9001, 9003, 9004]
    assert member.brokers("EXTERNAL") == []
    assert member.brokers("EXTERNAL") == []
    lacking = [r for r in caplog.records if "has no listener EXTERNAL" in r.getMessage()]
    assert len(lacking) == 3  # once per broker, not per request
