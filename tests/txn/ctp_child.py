"""A consume-transform-produce loop, exactly once: read `input` in group `group`
(read_committed), write each record's value to `output` and commit the consumed offsets in the
same transaction. Run as a child process by test_txn_exactly_once.py, which SIGKILLs it at random
moments and starts it again; on any error it exits and is restarted the same way.

    python ctp_child.py BOOTSTRAP INPUT OUTPUT GROUP TRANSACTIONAL_ID
"""

import sys
import time

import confluent_kafka as ck

bootstrap, source, sink, group, txn_id = sys.argv[1:6]
fast = {"reconnect.backoff.ms": 50, "reconnect.backoff.max.ms": 500, "retry.backoff.ms": 50}
consumer = ck.Consumer(
    {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        # Static membership: a restarted loop takes its predecessor's place without waiting
        # for that member's session to time out.
        "group.instance.id": group + "-static",
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "isolation.level": "read_committed",
        "session.timeout.ms": 6000,
        "heartbeat.interval.ms": 300,
        "fetch.wait.max.ms": 50,
        **fast,
    }
)
producer = ck.Producer(
    {"bootstrap.servers": bootstrap, "transactional.id": txn_id, "linger.ms": 5, **fast}
)
producer.init_transactions(30)
consumer.subscribe([source])
while True:
    msgs = [m for m in consumer.consume(10, 0.5) if m.error() is None]
    if not msgs:
        continue
    producer.begin_transaction()
    for m in msgs:
        producer.produce(sink, key=m.key(), value=m.value(), partition=m.partition())
    time.sleep(0.05)  # widen the window a kill can land in
    producer.send_offsets_to_transaction(
        consumer.position(consumer.assignment()), consumer.consumer_group_metadata(), 30
    )
    producer.commit_transaction(30)
