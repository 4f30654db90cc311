#!/usr/bin/env python
"""The log cleaner: how fast it compacts a big partition, and what that costs producers.

    python bench/cleaner_bench.py            # 1 GiB partition, 100,000 keys, both workers (~5 min)
    python bench/cleaner_bench.py --quick    # 256 MiB, 10,000 keys (~1-2 min)
    python bench/cleaner_bench.py --worker process --size-mb 256 --keys 50000 --window-s 10

Each run is done twice, with the cleaner's worker as a thread of the broker (Kafka's design, the
default) and as a child process (`log.cleaner.worker.process=true`, storage/cleaner_worker.py),
each on a fresh broker and partition (`--worker` picks one).

One broker (`gregor.testing.Broker`, log level INFO, a temp dir under `--dir`), one compacted
topic with one partition (segment.bytes 64 MiB; 8 MiB with --quick), filled through the
broker by confluent-kafka with 70% of `--size-mb` of records: uniformly random keys out of
`--keys`, values of `--value-bytes` random bytes, no compression (so log bytes ~ payload bytes).
While it fills, min.cleanable.dirty.ratio is 1.0 (nothing is cleaned).

Then, on that partition, the same run:
  1. idle: produce as fast as possible for `--window-s` seconds or the last 30% of
     `--size-mb`, whichever comes first (same keys, same values);
  2. cleaning: set min.cleanable.dirty.ratio to 0.01 (IncrementalAlterConfigs, applied live)
     and produce as fast as possible until the cleaner-offset-checkpoint shows the cleaning
     done. The cleaner's own figures come from its log line (bytes read, written, seconds);
  3. idle again, as in 1, once no cleaning runs (the log is smaller now).
Produce figures are acknowledged records (acks=1, linger.ms 5, batch.size 256 KiB) per second
and payload MB/s. Cleaner throughput = bytes of log read by the cleaning pass (the partition
as it was, clean + dirty) / the cleaning's wall time; the offset-map pass reads the dirty part
once more (reported too).

Before step 2 the partition directory is copied (unless --no-standalone); after the broker
stops, the copy is cleaned in this process with LogCleaner.clean_once, nothing else running:
the cleaner's throughput alone, for comparison.

The machine has 2 cores and is shared: the report gives the load average before and after
each phase and the broker's CPU seconds (utime+stime) per phase. Writes
bench/results/cleaner-<date>[-quick].md and .json.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import random
import re
import shutil
import sys
import tempfile
import time
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)

from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.admin import (  # noqa: E402
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
)

from gregor.storage import checkpoints  # noqa: E402
from gregor.storage.cleaner import CHECKPOINT_FILE, CleanerConfig, LogCleaner  # noqa: E402
from gregor.storage.config import LogConfig  # noqa: E402
from gregor.storage.log_manager import LogManager  # noqa: E402
from gregor.testing.broker import Broker  # noqa: E402

TOPIC = "compacted"
MB = 1024 * 1024
_CLEANED = re.compile(
    r"cleaned (\S+): \[(\d+), (\d+)\) in (\d+) group\(s\), ([\d.]+) MB read, ([\d.]+) MB written .*?"
    r"(\d+) of (\d+) records kept, ([\d.]+) s \(([\d.]+) MB/s\); map: (\d+) keys"
)


def loadavg() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Load:
    """A producer of random keys and values as fast as the client takes them."""

    def __init__(self, bootstrap: str, keys: int, value_bytes: int, seed: int = 1) -> None:
        self.producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "linger.ms": 5,
                "batch.size": 256 * 1024,
                "acks": 1,
                "queue.buffering.max.kbytes": 32 * 1024,
                "compression.type": "none",
            }
        )
        self.keys = [b"key-%07d" % k for k in range(keys)]
        rng = random.Random(seed)
        self.pool = rng.randbytes(1 << 20)
        self.value_bytes = value_bytes
        self.rng = rng
        self.acked = 0
        self.acked_bytes = 0
        self.errors = 0

    def _on_delivery(self, err: Any, msg: Any) -> None:
        if err is not None:
            self.errors += 1
        else:
            self.acked += 1
            self.acked_bytes += len(msg.value()) + len(msg.key())

    def run(
        self, *, max_bytes: int | None = None, seconds: float | None = None, until: Any = None
    ) -> dict:
        """Produce until `max_bytes` are acknowledged, `seconds` pass, or `until()` is true;
        returns what was acknowledged in between, per second."""
        start_acked, start_bytes = self.acked, self.acked_bytes
        t0 = time.monotonic()
        rng, keys, pool, n = self.rng, self.keys, self.pool, self.value_bytes
        produce, poll = self.producer.produce, self.producer.poll
        i = 0
        while True:
            i += 1
            if i % 256 == 0:
                poll(0)
                elapsed = time.monotonic() - t0
                if max_bytes is not None and self.acked_bytes - start_bytes >= max_bytes:
                    break
                if seconds is not None and elapsed >= seconds:
                    break
                if until is not None and i % 4096 == 0 and until():
                    break
            off = rng.randrange(0, len(pool) - n)
            try:
                produce(
                    TOPIC,
                    key=keys[rng.randrange(len(keys))],
                    value=pool[off : off + n],
                    partition=0,
                    on_delivery=self._on_delivery,
                )
            except BufferError:
                poll(0.005)
        elapsed = time.monotonic() - t0
        # Acknowledgements of records produced inside the window, counted when they come.
        self.producer.flush(60)
        records = self.acked - start_acked
        data = self.acked_bytes - start_bytes
        return {
            "seconds": round(elapsed, 2),
            "records": records,
            "records_per_s": round(records / elapsed),
            "mb_per_s": round(data / MB / elapsed, 1),
        }


def checkpoint_of(data_dir: str) -> int:
    try:
        return checkpoints.read_offsets(os.path.join(data_dir, "logs", CHECKPOINT_FILE)).get(
            (TOPIC, 0), -1
        )
    except (checkpoints.CheckpointError, ValueError):
        return -1


def set_ratio(admin: AdminClient, ratio: str) -> None:
    entries = [
        ConfigEntry("min.cleanable.dirty.ratio", ratio, incremental_operation=AlterConfigOpType.SET)
    ]
    res = ConfigResource("topic", TOPIC, incremental_configs=entries)
    admin.incremental_alter_configs([res], request_timeout=30)[res].result()


def wait_quiet(broker: Broker, timeout_s: float = 600) -> None:
    """Until every cleaning the broker began has ended (its log says so)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        text = broker.read_log()
        began = text.count(f"cleaning {TOPIC}-0: dirty")
        ended = text.count(f"cleaned {TOPIC}-0:") + text.count(f"cleaning {TOPIC}-0 stopped")
        if began == ended:
            return
        time.sleep(0.2)
    raise TimeoutError("the cleaner never went quiet")


def partition_bytes(data_dir: str) -> int:
    d = os.path.join(data_dir, "logs", f"{TOPIC}-0")
    return sum(os.path.getsize(os.path.join(d, n)) for n in os.listdir(d) if n.endswith(".log"))


def standalone(copy_dir: str, segment_bytes: int, dedupe: int) -> dict:
    """Clean the copied partition in this process, nothing else running."""
    cfg = LogConfig(
        segment_bytes=segment_bytes, cleanup_policy="compact", min_cleanable_dirty_ratio=0.01
    )
    mgr = LogManager([copy_dir], cfg)
    mgr.startup()
    log_ = mgr.get(TOPIC, 0)
    assert log_ is not None
    log_.update_high_watermark(log_.log_end_offset)
    size = log_.size_in_bytes
    cleaner = LogCleaner(mgr, CleanerConfig(dedupe_buffer_size=dedupe))
    load0 = loadavg()
    t0 = time.monotonic()
    stats = cleaner.clean_once(int(time.time() * 1000))
    wall = time.monotonic() - t0
    assert stats is not None
    out = {
        "partition_mb": round(size / MB, 1),
        "seconds": round(wall, 2),
        "read_mb": round(stats.bytes_read / MB, 1),
        "map_read_mb": round(stats.map_bytes_read / MB, 1),
        "written_mb": round(stats.bytes_written / MB, 1),
        "cleaned_mb_per_s": round(stats.bytes_read / MB / wall, 1),
        "map_s": round(stats.map_done_s - stats.start_s, 2),
        "records_kept": stats.records_written,
        "records_read": stats.records_read,
        "load_before": load0,
        "load_after": loadavg(),
    }
    mgr.shutdown()
    return out


def run_mode(
    mode: str, args: argparse.Namespace, sizes: dict, work: str, standalone_copy: bool
) -> dict:
    """One broker, one partition, the three phases, with the cleaner's worker in `mode`."""
    size_mb, keys, window, segment_bytes = (
        sizes["size_mb"],
        sizes["keys"],
        sizes["window_s"],
        sizes["segment_bytes"],
    )
    data_dir = os.path.join(work, f"broker-{mode}")
    os.makedirs(data_dir)
    report: dict[str, Any] = {"worker": mode, "load_start": loadavg()}
    broker = Broker(
        {
            "log.cleaner.backoff.ms": "200",
            "log.cleaner.dedupe.buffer.size": str(args.dedupe_mb * MB),
            "log.cleaner.worker.process": "true" if mode == "process" else "false",
            "log.retention.check.interval.ms": "3600000",
        },
        data_dir=data_dir,
        log_level="INFO",
    )
    broker.start()
    copy = None
    try:
        pid = broker.process.pid  # type: ignore[union-attr]
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        configs = {
            "cleanup.policy": "compact",
            "segment.bytes": str(segment_bytes),
            "min.cleanable.dirty.ratio": "1.0",  # nothing is cleaned while it fills
            "retention.ms": "-1",
        }
        admin.create_topics([NewTopic(TOPIC, 1, 1, config=configs)])[TOPIC].result(30)
        load = Load(broker.bootstrap, keys, args.value_bytes)

        # The idle window produces the last `share` of the partition: it is about --size-mb when
        # the cleaning starts.
        share = 0.3
        print(f"[{mode}] filling {size_mb * (1 - share):.0f} MiB with {keys} keys ...")
        report["fill"] = load.run(max_bytes=int(size_mb * MB * (1 - share)))
        print(f"  fill: {report['fill']}")

        def phase(name: str, **kw: Any) -> dict:
            cpu0, load0 = cpu_seconds(pid), loadavg()
            out = load.run(**kw)
            out["broker_cpu_s"] = round(cpu_seconds(pid) - cpu0, 2)
            out["load_before"], out["load_after"] = load0, loadavg()
            print(f"  {name}: {out}")
            return out

        report["idle_before"] = phase(
            "idle before", seconds=window, max_bytes=int(size_mb * MB * share)
        )
        part_mb = partition_bytes(data_dir) / MB
        report["partition_mb_before_cleaning"] = round(part_mb, 1)
        if standalone_copy:
            copy = os.path.join(work, "copy")
            shutil.copytree(
                os.path.join(data_dir, "logs", f"{TOPIC}-0"),
                os.path.join(copy, f"{TOPIC}-0"),
                ignore=shutil.ignore_patterns("*.snapshot"),
            )

        print(f"[{mode}] cleaning {part_mb:.0f} MiB while producing ...")
        log_mark = len(broker.read_log())
        set_ratio(admin, "0.01")
        t0 = time.monotonic()
        report["during_cleaning"] = phase(
            "during cleaning", until=lambda: checkpoint_of(data_dir) >= 0
        )
        while checkpoint_of(data_dir) < 0:
            time.sleep(0.05)
        report["cleaning_wall_s"] = round(time.monotonic() - t0, 2)
        set_ratio(admin, "1.0")  # no second cleaning of what was produced meanwhile
        m = None
        deadline = time.monotonic() + 10
        while m is None and time.monotonic() < deadline:
            m = _CLEANED.search(broker.read_log()[log_mark:])
            time.sleep(0.1)
        if m:
            report["cleaner"] = {
                "range": [int(m.group(2)), int(m.group(3))],
                "groups": int(m.group(4)),
                "read_mb": float(m.group(5)),
                "written_mb": float(m.group(6)),
                "records_kept": int(m.group(7)),
                "records_read": int(m.group(8)),
                "seconds": float(m.group(9)),
                "logged_mb_per_s_incl_map_pass": float(m.group(10)),
                "cleaned_mb_per_s": round(float(m.group(5)) / float(m.group(9)), 1),
                "map_keys": int(m.group(11)),
            }
            print(f"  cleaner: {report['cleaner']}")
        # What was produced meanwhile makes the log dirty again: a second cleaning may have begun
        # before the ratio went back to 1.0. Wait until no cleaning runs.
        wait_quiet(broker)
        report["partition_mb_after_cleaning"] = round(partition_bytes(data_dir) / MB, 1)
        report["idle_after"] = phase(
            "idle after", seconds=window, max_bytes=int(size_mb * MB * share)
        )
        report["broker_errors"] = [
            line
            for line in broker.read_log().splitlines()
            if " ERROR " in line or "Traceback" in line
        ][:5]
    finally:
        broker.stop()
        report["load_end"] = loadavg()
        shutil.rmtree(data_dir, ignore_errors=True)
    if copy is not None:
        print("cleaning the copy alone, in this process ...")
        report["standalone"] = standalone(copy, segment_bytes, args.dedupe_mb * MB)
        print(f"  standalone: {report['standalone']}")
        shutil.rmtree(copy, ignore_errors=True)
    return report


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--size-mb", type=int)
    ap.add_argument("--keys", type=int)
    ap.add_argument("--value-bytes", type=int, default=1000)
    ap.add_argument("--window-s", type=float)
    ap.add_argument("--dedupe-mb", type=int, default=128, help="log.cleaner.dedupe.buffer.size")
    ap.add_argument(
        "--worker",
        choices=["thread", "process", "both"],
        default="both",
        help="where the broker cleans (log.cleaner.worker.process); both: one run each",
    )
    ap.add_argument("--dir", default=tempfile.gettempdir())
    ap.add_argument("--no-standalone", action="store_true")
    args = ap.parse_args()
    sizes = {
        "size_mb": args.size_mb or (256 if args.quick else 1024),
        "keys": args.keys or (10_000 if args.quick else 100_000),
        "window_s": args.window_s or (4.0 if args.quick else 15.0),
        "segment_bytes": (8 if args.quick else 64) * MB,
    }
    work = tempfile.mkdtemp(prefix="cleaner-bench-", dir=args.dir)
    report: dict[str, Any] = {
        "date": dt.datetime.now().isoformat(timespec="seconds"),
        "settings": {**sizes, "value_bytes": args.value_bytes, "dedupe_buffer_mb": args.dedupe_mb},
        "machine": {"cpus": os.cpu_count(), "load_start": loadavg()},
        "runs": [],
    }
    print(f"work dir {work}; load {loadavg()}")
    modes = ["thread", "process"] if args.worker == "both" else [args.worker]
    try:
        for i, mode in enumerate(modes):
            report["runs"].append(
                run_mode(mode, args, sizes, work, standalone_copy=i == 0 and not args.no_standalone)
            )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    report["machine"]["load_end"] = loadavg()
    write_report(report, args.quick)


def write_report(r: dict, quick: bool) -> None:
    day = dt.date.today().isoformat()
    base = os.path.join(HERE, "results", f"cleaner-{day}{'-quick' if quick else ''}")
    os.makedirs(os.path.dirname(base), exist_ok=True)
    with open(base + ".json", "w") as f:
        json.dump(r, f, indent=2)
    s = r["settings"]
    lines = [
        f"# Log cleaner benchmark ({r['date']})",
        "",
        f"One partition of ~{s['size_mb']} MiB, {s['keys']} keys, values of {s['value_bytes']} B, segment.bytes "
        f"{s['segment_bytes'] // MB} MiB, dedupe buffer {s['dedupe_buffer_mb']} MiB; producer: confluent-kafka, acks=1, "
        f"linger.ms 5, in the bench's process. {r['machine']['cpus']} cores, shared: load {r['machine']['load_start']} "
        f"at the start, {r['machine']['load_end']} at the end.",
        "",
        "| worker | phase | seconds | records/s | MB/s | broker CPU s | load before -> after |",
        "|---|---|---|---|---|---|---|",
    ]
    for run in r["runs"]:
        for name in ("idle_before", "during_cleaning", "idle_after"):
            p = run[name]
            lines.append(
                f"| {run['worker']} | produce, {name.replace('_', ' ')} | {p['seconds']} | {p['records_per_s']} | "
                f"{p['mb_per_s']} | {p['broker_cpu_s']} | {p['load_before'][0]} -> {p['load_after'][0]} |"
            )
    lines.append("")
    for run in r["runs"]:
        idle, during, c = run["idle_before"], run["during_cleaning"], run.get("cleaner", {})
        lines.append(
            f"- **{run['worker']}**: partition {run['partition_mb_before_cleaning']} MiB -> "
            f"{run['partition_mb_after_cleaning']} MiB. Produce while cleaning: "
            f"**{during['records_per_s'] / max(idle['records_per_s'], 1):.0%} of idle**."
        )
        if c:
            lines.append(
                f"  Cleaner in the broker, while producing: {c['read_mb']} MB of log cleaned in {c['seconds']} s = "
                f"**{c['cleaned_mb_per_s']} MB/s** ({c['logged_mb_per_s_incl_map_pass']} MB/s counting the offset-map "
                f"pass); {c['written_mb']} MB written, {c['records_kept']} of {c['records_read']} records kept, "
                f"{c['groups']} group(s), {c['map_keys']} keys mapped."
            )
        if run.get("broker_errors"):
            lines.append(f"  Broker errors: {run['broker_errors']}")
        if "standalone" in run:
            a = run["standalone"]
            lines.append(
                f"- Cleaner alone (the same partition, copied before, cleaned in the bench's process): {a['read_mb']} MB "
                f"in {a['seconds']} s = **{a['cleaned_mb_per_s']} MB/s** (offset map {a['map_s']} s); load "
                f"{a['load_before']} -> {a['load_after']}."
            )
    lines += ["", "```json", json.dumps(r, indent=2), "```", ""]
    with open(base + ".md", "w") as f:
        f.write("\n".join(lines))
    print("\n".join(lines[: lines.index("```json")]))
    print(f"wrote {base}.md")


if __name__ == "__main__":
    main()
