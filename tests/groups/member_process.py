"""A confluent-kafka group member in its own process, so a test can SIGKILL it: no LeaveGroup,
no goodbye, exactly a crash.

    python member_process.py BOOTSTRAP GROUP TOPIC SESSION_MS [GROUP_INSTANCE_ID]

Prints `ASSIGNED 0,1,2` each time its assignment changes (after the rebalance callbacks), then
polls until killed.
"""

from __future__ import annotations

import sys

import confluent_kafka as ck


def main() -> None:
    bootstrap, group, topic, session_ms = sys.argv[1:5]
    conf = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "session.timeout.ms": int(session_ms),
        "heartbeat.interval.ms": 300,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
    }
    if len(sys.argv) > 5:
        conf["group.instance.id"] = sys.argv[5]
    c = ck.Consumer(conf)
    c.subscribe([topic])
    last: list[int] = []
    while True:
        c.poll(0.05)
        now = sorted(tp.partition for tp in c.assignment())
        if now != last:
            last = now
            print("ASSIGNED " + ",".join(map(str, now)), flush=True)


if __name__ == "__main__":
    main()
