"""How long one broker stops answering while it creates the partitions of one big topic.

    python bench/partition_creation_stall.py [PARTITIONS]

Starts a broker (a child process, port 0, temp dir), sends CreateTopics for PARTITIONS
partitions (default 9,999, below Kafka's per-request limit) on one connection and ApiVersions
on another every 10 ms until every partition has a leader on disk; prints the creation time and
the ApiVersions round trips (median, max). The broker runs its loop-stall monitor
(`gregor.loop.stall.log.ms`, 1 ms): the longest time the event loop was held while the topic was
created, and the stalls over 1 ms, are printed too (what a request arriving then waited, read
from the loop itself rather than through the client's round trip).
"""

from __future__ import annotations

import os
import re
import statistics
import sys
import threading
import time

from gregor import Broker
from gregor.protocol import api_keys
from gregor.protocol.messages import ApiVersionsRequest, CreateTopicsRequest
from gregor.testing.raw_client import RawClient


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 9999
    config = {"num.partitions": "1", "gregor.loop.stall.log.ms": "1"}
    with Broker(config) as broker:
        stop = threading.Event()
        rtts: list[float] = []

        def ping() -> None:
            with RawClient(broker.bootstrap) as raw:
                while not stop.is_set():
                    t0 = time.perf_counter()
                    raw.call(
                        api_keys.API_VERSIONS,
                        3,
                        ApiVersionsRequest(client_software_name="b", client_software_version="1"),
                    )
                    rtts.append((time.perf_counter() - t0) * 1000)
                    time.sleep(0.01)

        pinger = threading.Thread(target=ping)
        pinger.start()
        time.sleep(0.3)
        log_from = os.path.getsize(broker.log_path)
        t0 = time.perf_counter()
        with RawClient(broker.bootstrap, timeout_s=120) as raw:
            topic = CreateTopicsRequest.CreatableTopic(
                name="big", num_partitions=n, replication_factor=1, assignments=[], configs=[]
            )
            answer = raw.call(
                api_keys.CREATE_TOPICS,
                7,
                CreateTopicsRequest(topics=[topic], timeout_ms=60000, validate_only=False),
            )
        answered = time.perf_counter() - t0
        logs = os.path.join(broker.data_dir, "logs")
        while sum(1 for d in os.listdir(logs) if d.startswith("big-")) < n:
            time.sleep(0.05)
        created = time.perf_counter() - t0
        time.sleep(0.3)
        stop.set()
        pinger.join()
        with open(broker.log_path, errors="replace") as f:
            f.seek(log_from)
            stalls = [float(m) for m in re.findall(r"event loop held ([0-9.]+) ms", f.read())]
        print(
            f"{n} partitions: CreateTopics answered in {answered:.2f} s (error {answer.topics[0].error_code}), "
            f"all created in {created:.2f} s; ApiVersions meanwhile: {len(rtts)} calls, "
            f"median {statistics.median(rtts):.1f} ms, max {max(rtts):.1f} ms; loop held over 1 ms "
            f"{len(stalls)} times, longest {max(stalls, default=0.0):.1f} ms"
        )


if __name__ == "__main__":
    main()
