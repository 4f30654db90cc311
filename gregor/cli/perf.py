"""`gregor perf produce` and `gregor perf consume`: load generators with the flags of Kafka's
kafka-producer-perf-test.sh and kafka-consumer-perf-test.sh, on confluent-kafka as users'
programs are.

Owns the send and receive loops, their live progress line (rich, on stderr, only when stderr is
a terminal), and the final figures: plain text in Kafka's words, or one JSON object
(`--output json`). Latencies are kept in `perf_stats.LatencyHistogram`, pacing is
`throttle.ThroughputThrottler`. A mistake the user can make (an unreachable bootstrap, an
unknown topic, a bad client property or file) ends the run with one line on stderr and exit
status 1, never a traceback; librdkafka's own log lines are shown only with `--verbose`.
"""

from __future__ import annotations

import argparse
import codecs
import random
import signal
import sys
import time
from collections.abc import Callable
from typing import Any

from gregor.cli import connect, output
from gregor.cli.errors import CliError
from gregor.cli.perf_client import check_topic, make_client
from gregor.cli.perf_stats import MB, LatencyHistogram, summary
from gregor.cli.specs import positive_int, rate
from gregor.cli.throttle import ThroughputThrottler

BATCH = 500  # records taken per consume() call, and sends between two producer polls

JSON_FIELDS = """\
--output json prints one object:
  records          records delivered (produce) or received (consume)
  bytes            their value bytes (consume: key and value bytes)
  elapsed_ms       from the first send (or the subscribe) to the last delivery (or record)
  records_per_sec  records / elapsed
  mb_per_sec       bytes / 2^20 / elapsed
  latency_ms       {avg, p50, p95, p99, p999, max}, milliseconds, nearest-rank percentiles
                   (within 0.8% above the exact value; avg and max are exact)
"""
PRODUCE_JSON = JSON_FIELDS + "  failed           records whose delivery failed\n"
CONSUME_JSON = (
    JSON_FIELDS
    + "  rebalance_time_ms  from the subscribe to the first partition assignment\n"
    + "  fetch_time_ms      elapsed_ms minus rebalance_time_ms\n"
)
PRODUCE_DESCRIPTION = """\
Send --num-records records and report throughput and latency, as kafka-producer-perf-test.sh.

A record's latency runs from its send (produce()) to its delivery report: the broker's
acknowledgement, as the acks setting asks (librdkafka's message latency). Records have no key;
values are --record-size random letters (one value for every record) or, with --payload-file,
one of the file's records chosen at random for each.
"""
CONSUME_LATENCY = """\
Latency is the time a record is received minus its timestamp (CreateTime, set by the producer,
or LogAppendTime, set by the broker). It is end-to-end only if the producer's (or broker's)
clock and this machine's agree; a clock behind shows latencies too small (negative ones count
as 0).
"""


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("perf", help="load tests, as kafka-producer/consumer-perf-test.sh")
    verbs = p.add_subparsers(dest="verb", required=True)
    pr = verbs.add_parser(
        "produce",
        help="send records as fast as allowed and report throughput and latency",
        description=PRODUCE_DESCRIPTION,
        epilog=PRODUCE_JSON,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _add_client_options(pr, "producer")
    pr.add_argument("--num-records", type=positive_int, required=True, metavar="N")
    size = pr.add_mutually_exclusive_group(required=True)
    size.add_argument("--record-size", type=positive_int, metavar="BYTES")
    size.add_argument(
        "--payload-file", metavar="FILE", help="values chosen at random among the file's records"
    )
    pr.add_argument(
        "--payload-delimiter",
        default="\\n",
        metavar="SEP",
        help="what separates records in --payload-file (default \\n; escapes such as \\t work)",
    )
    pr.add_argument(
        "--throughput",
        type=rate,
        default=-1,
        metavar="N",
        help="at most N records/s on average (default -1: no limit)",
    )
    pr.set_defaults(func=_produce)
    co = verbs.add_parser(
        "consume",
        help="read records and report throughput and latency",
        description="Read --messages records and report throughput, as "
        "kafka-consumer-perf-test.sh, and latency.\n\n" + CONSUME_LATENCY,
        epilog=CONSUME_JSON,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _add_client_options(co, "consumer")
    co.add_argument("--messages", type=positive_int, required=True, metavar="N")
    co.add_argument("--group", help="group.id (default perf-consumer-<random>)")
    co.set_defaults(func=_consume)


def _add_client_options(p: argparse.ArgumentParser, role: str) -> None:
    p.add_argument("--topic", required=True)
    connect.add_bootstrap_arg(p, None)  # a properties file may name the brokers
    connect.add_settings_args(p)
    p.add_argument(
        f"--{role}-props",
        nargs="+",
        default=[],
        metavar="KEY=VALUE",
        help=f"{role} configs (librdkafka names), over the files",
    )
    p.add_argument(f"--{role}.config", dest=f"{role}_config", metavar="FILE")
    p.add_argument(
        "--timeout",
        type=positive_int,
        default=10_000,
        metavar="MS",
        help="milliseconds, as Kafka's perf tools take it (other gregor commands take seconds): "
        "wait this long for the bootstrap and the topic"
        + (
            ", and at most this long between records"
            if role == "consumer"
            else ", and for what was sent after a Ctrl-C"
        )
        + " (default 10000)",
    )
    p.add_argument(
        "--output",
        "-o",
        choices=["plain", "json"],
        default="plain",
        help="plain (Kafka's wording, the default) or json",
    )


def _now_ms() -> float:
    return time.monotonic() * 1000


# --- the live line and the figures ---------------------------------------------------------------


class ProgressLine:
    """rich's progress bar on stderr while the run lasts, redrawn at most 5 times a second;
    nothing at all when stderr is not a terminal."""

    def __init__(self, label: str, total: int) -> None:
        self._progress: Any = None
        self._next_ms = 0.0
        if not sys.stderr.isatty():
            return
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
        )

        self._progress = Progress(
            TextColumn(label),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[figures]}"),
            TimeElapsedColumn(),
            console=Console(stderr=True),
            transient=True,
        )
        self._task = self._progress.add_task(label, total=total, figures="")
        self._progress.start()

    def update(self, done: int, figures: Callable[[], str]) -> None:
        if self._progress is None:
            return
        now = _now_ms()
        if now >= self._next_ms:
            self._next_ms = now + 200
            self._progress.update(self._task, completed=done, figures=figures())

    def stop(self) -> None:
        if self._progress is not None:
            self._progress.stop()


def _live_figures(records: int, size_bytes: int, start_ms: float, hist: LatencyHistogram) -> str:
    seconds = max(1e-3, (_now_ms() - start_ms) / 1000)
    return (
        f"{records / seconds:,.0f} rec/s  {size_bytes / MB / seconds:.2f} MB/s  "
        f"avg {hist.mean_us() / 1000:.1f} ms  max {hist.max_us / 1000:.1f} ms"
    )


def _latency_text(lat: dict[str, float]) -> str:
    return (
        f"{lat['avg']:.2f} ms avg latency, {lat['max']:.2f} ms max latency, "
        f"{lat['p50']:.2f} ms 50th, {lat['p95']:.2f} ms 95th, {lat['p99']:.2f} ms 99th, "
        f"{lat['p999']:.2f} ms 99.9th."
    )


# --- produce -------------------------------------------------------------------------------------


class _ProduceRun:
    def __init__(self) -> None:
        self.hist = LatencyHistogram()
        self.delivered = 0
        self.bytes = 0
        self.failed = 0
        self.first_error = ""

    def on_delivery(self, err: Any, msg: Any) -> None:
        if err is not None:
            self.failed += 1
            self.first_error = self.first_error or err.str()
            return
        self.delivered += 1
        self.bytes += len(msg)
        latency_s = msg.latency()
        if latency_s is not None:
            self.hist.record_us(int(latency_s * 1_000_000))


def _produce(args: argparse.Namespace) -> int:
    payloads = _payloads(args)
    producer = make_client(args, "producer")
    check_topic(producer, args.topic, args.timeout)
    run = _ProduceRun()
    progress = ProgressLine("produce", args.num_records)
    start_ms = _now_ms()
    interrupted = False
    try:
        with _CtrlC() as ctrl_c:
            _send(producer, args, payloads, run, progress, start_ms, ctrl_c)
    except KeyboardInterrupt:
        # What was sent is still waited for, --timeout at most (a second Ctrl-C ends it).
        interrupted = True
    finally:
        _drain(producer, run, progress, start_ms, args.timeout if interrupted else None)
        progress.stop()
    figures = summary(run.delivered, run.bytes, _now_ms() - start_ms, run.hist)
    figures["failed"] = run.failed
    if args.output == "json":
        output.print_json(figures)
    else:
        print(
            f"{run.delivered} records sent, {figures['records_per_sec']:.1f} records/sec "
            f"({figures['mb_per_sec']:.2f} MB/sec), " + _latency_text(figures["latency_ms"]),
            flush=True,
        )
    if run.failed:
        raise CliError(f"{run.failed} records were not delivered: {run.first_error}")
    return 130 if interrupted else 0


def _payloads(args: argparse.Namespace) -> list[bytes]:
    if args.record_size is not None:
        rng = random.Random()
        return [bytes(rng.choices(range(65, 91), k=args.record_size))]  # A..Z
    try:
        with open(args.payload_file, "rb") as f:
            data = f.read()
    except OSError as exc:
        raise CliError(f"--payload-file {args.payload_file}: {exc.strerror}") from None
    delimiter = codecs.decode(args.payload_delimiter, "unicode_escape").encode()
    if not delimiter:
        raise CliError("--payload-delimiter must not be empty")
    items = [item for item in data.split(delimiter) if item]
    if not items:
        raise CliError(f"--payload-file {args.payload_file} holds no records")
    return items


def _send(
    producer: Any,
    args: argparse.Namespace,
    payloads: list[bytes],
    run: _ProduceRun,
    progress: ProgressLine,
    start_ms: float,
    ctrl_c: _CtrlC,
) -> None:
    throttler = ThroughputThrottler(args.throughput, start_ms)
    rng = random.Random()
    only = payloads[0] if len(payloads) == 1 else None
    send, topic, on_delivery = producer.produce, args.topic, run.on_delivery
    for i in range(args.num_records):
        ctrl_c.check()
        if not throttler.unlimited:
            # Waits under 1 ms are left to add up: sleeping for less costs more than it paces.
            while (wait_ms := throttler.wait_ms(i, _now_ms())) >= 1.0:
                producer.poll(wait_ms / 1000)
        value = only if only is not None else rng.choice(payloads)
        while True:
            try:
                send(topic, value, on_delivery=on_delivery)
                break
            except BufferError:  # the producer's queue is full: let deliveries drain it
                producer.poll(0.01)
        if i % BATCH == 0:
            producer.poll(0)
            progress.update(
                run.delivered, lambda: _live_figures(run.delivered, run.bytes, start_ms, run.hist)
            )


class _CtrlC:
    """While records are sent, Ctrl-C only sets a flag that the send loop reads between records:
    a KeyboardInterrupt raised inside librdkafka's poll (in a delivery callback) would come out
    of it as a SystemError."""

    def __init__(self) -> None:
        self.pressed = False
        self._previous: Any = None

    def __enter__(self) -> _CtrlC:
        try:
            self._previous = signal.signal(signal.SIGINT, self._press)
        except ValueError:  # not the main thread: Ctrl-C stays Python's default
            self._previous = None
        return self

    def __exit__(self, *exc: object) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)

    def _press(self, _signum: int, _frame: Any) -> None:
        self.pressed = True

    def check(self) -> None:
        if self.pressed:
            raise KeyboardInterrupt


def _drain(
    producer: Any,
    run: _ProduceRun,
    progress: ProgressLine,
    start_ms: float,
    limit_ms: float | None,
) -> None:
    """Serve delivery reports until none is outstanding (or `limit_ms` passes, after a Ctrl-C);
    a record librdkafka cannot deliver fails after its message.timeout.ms."""
    deadline = None if limit_ms is None else _now_ms() + limit_ms
    while len(producer) and (deadline is None or _now_ms() < deadline):
        producer.poll(0.1)
        progress.update(
            run.delivered, lambda: _live_figures(run.delivered, run.bytes, start_ms, run.hist)
        )


# --- consume -------------------------------------------------------------------------------------


class _ConsumeRun:
    def __init__(self, start_ms: float) -> None:
        self.hist = LatencyHistogram()
        self.start_ms = start_ms
        self.records = 0
        self.bytes = 0
        self.assigned_ms: float | None = None
        self.last_record_ms = start_ms

    def on_assign(self, _consumer: Any, _partitions: Any) -> None:
        if self.assigned_ms is None:
            self.assigned_ms = _now_ms()


def _consume(args: argparse.Namespace) -> int:
    consumer = make_client(args, "consumer")
    try:
        check_topic(consumer, args.topic, args.timeout)
        run = _ConsumeRun(_now_ms())
        consumer.subscribe([args.topic], on_assign=run.on_assign)
        progress = ProgressLine("consume", args.messages)
        interrupted = False
        try:
            _receive(consumer, args, run, progress)
        except KeyboardInterrupt:
            interrupted = True
        finally:
            progress.stop()
    finally:
        consumer.close()
    _print_consumed(args, run)
    if interrupted:
        return 130
    if run.records < args.messages:
        raise CliError(
            f"no record for {args.timeout} ms (--timeout): "
            f"received {run.records} of {args.messages} records"
        )
    return 0


def _receive(
    consumer: Any, args: argparse.Namespace, run: _ConsumeRun, progress: ProgressLine
) -> None:
    from confluent_kafka import TIMESTAMP_NOT_AVAILABLE

    while run.records < args.messages:
        # What is already here, without waiting: consume() with a timeout waits for a full
        # batch, which at 5,000 records/s would add 50 ms to every record's latency.
        batch = consumer.consume(min(BATCH, args.messages - run.records), 0)
        if not batch:
            one = consumer.poll(0.1)
            batch = [one] if one is not None else []
        now = _now_ms()
        if not batch:
            if now - run.last_record_ms > args.timeout:
                return
            continue
        run.last_record_ms = now
        received_ms = time.time() * 1000  # wall clock: compared with the records' timestamps
        for msg in batch:
            err = msg.error()
            if err is not None:
                raise CliError(f"topic {args.topic}: {err.str()}")
            run.records += 1
            run.bytes += len(msg) + len(msg.key() or b"")
            ts_type, ts = msg.timestamp()
            if ts_type != TIMESTAMP_NOT_AVAILABLE:
                run.hist.record_us(int((received_ms - ts) * 1000))
        progress.update(
            run.records, lambda: _live_figures(run.records, run.bytes, run.start_ms, run.hist)
        )


def _print_consumed(args: argparse.Namespace, run: _ConsumeRun) -> None:
    end_ms = run.last_record_ms if run.records else _now_ms()
    figures = summary(run.records, run.bytes, end_ms - run.start_ms, run.hist)
    assigned = run.assigned_ms if run.assigned_ms is not None else end_ms
    figures["rebalance_time_ms"] = round(assigned - run.start_ms, 3)
    figures["fetch_time_ms"] = round(max(0.0, end_ms - assigned), 3)
    if args.output == "json":
        output.print_json(figures)
        return
    # Kafka's columns; start and end times are this machine's wall clock.
    wall_end = time.time() * 1000 - (_now_ms() - end_ms)
    wall_start = wall_end - figures["elapsed_ms"]
    fetch_s = figures["fetch_time_ms"] / 1000
    mb = run.bytes / MB
    print(
        "start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec, "
        "rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec"
    )
    print(
        f"{_stamp(wall_start)}, {_stamp(wall_end)}, {mb:.4f}, {figures['mb_per_sec']:.4f}, "
        f"{run.records}, {figures['records_per_sec']:.4f}, "
        f"{figures['rebalance_time_ms']:.0f}, {figures['fetch_time_ms']:.0f}, "
        f"{mb / fetch_s if fetch_s else 0.0:.4f}, {run.records / fetch_s if fetch_s else 0.0:.4f}"
    )
    print("latency (receive time minus record timestamp): " + _latency_text(figures["latency_ms"]))


def _stamp(wall_ms: float) -> str:
    """Kafka's yyyy-MM-dd HH:mm:ss:SSS, local time."""
    seconds = wall_ms / 1000
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(seconds)) + (
        f":{int(wall_ms % 1000):03d}"
    )
