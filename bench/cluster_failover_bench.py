"""Failover of a 3-process gregor cluster: SIGKILL the active controller while a client creates
topics, and time kill -> the first CreateTopics acknowledged afterwards; the killed node is
restarted (and must catch up) before the next kill.

    PYTHONPATH=. python3 bench/cluster_failover_bench.py --kills 5

The client is confluent-kafka's AdminClient; after any error it makes a new one (librdkafka's
admin client does not refresh its metadata when its controller dies). Default timeouts
(controller.quorum.fetch.timeout.ms 2000, election 1000) unless --set is given.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import uuid

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from gregor.testing.cluster import LocalCluster


def admin(bootstrap: str) -> AdminClient:
    return AdminClient(
        {
            "bootstrap.servers": bootstrap,
            "socket.timeout.ms": 3000,
            "topic.metadata.refresh.interval.ms": 1000,
        }
    )


def try_create(client: AdminClient, name: str) -> bool:
    try:
        client.create_topics([NewTopic(name, 1, 1)], operation_timeout=2, request_timeout=2)[
            name
        ].result(3)
        return True
    except KafkaException as exc:
        return exc.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--kills", type=int, default=5)
    p.add_argument("--set", action="append", default=[])
    args = p.parse_args()
    config = dict(item.split("=", 1) for item in args.set)
    times = []
    with LocalCluster(3, config=config, log_level="WARNING") as cluster:
        client = admin(cluster.bootstrap)
        while not try_create(client, "warm-up"):
            client = admin(cluster.bootstrap)
        for k in range(args.kills):
            victim = cluster.active_controller()
            killed = time.monotonic()
            cluster.kill(victim)
            client = admin(cluster.bootstrap)
            while not try_create(client, f"f-{k}-{uuid.uuid4().hex[:6]}"):
                client = admin(cluster.bootstrap)
            took = time.monotonic() - killed
            times.append(took)
            print(
                f"kill {k + 1}: node {victim} killed, first CreateTopics acknowledged after {took:.2f}s",
                flush=True,
            )
            cluster.start_node(victim)
            time.sleep(3)  # let it catch up and register again
    print(
        f"failover over {len(times)} kills: median {statistics.median(times):.2f}s, max {max(times):.2f}s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
