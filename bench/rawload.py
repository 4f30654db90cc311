#!/usr/bin/env python
"""A raw-socket load generator for one Kafka broker, and the machine's own limits.

    python bench/rawload.py produce --bootstrap H:P --topic T [--bytes N] [--inflight 8] [--broker-pid PID]
    python bench/rawload.py fetch   --bootstrap H:P --topic T [--bytes N] [--inflight 8] [--broker-pid PID]
    python bench/rawload.py tcp      [--bytes N]     # loopback TCP send throughput (1 MiB sendall loop)
    python bench/rawload.py sendfile --dir D [--bytes N]   # page-cached file -> loopback socket
    python bench/rawload.py write    --dir D [--bytes N]   # plain 1 MiB os.write loop (page cache)

Each prints one JSON object on stdout. The client is built so that it costs almost nothing, and
the broker is the thing measured:

- produce: ONE RecordBatch of exactly `--batch-bytes` (1 MiB) is built once with
  `build_batch`, wrapped once in a Produce request with `codec.encode_request` (acks=1) and
  joined into one bytes object. The same bytes are sent again and again (the broker assigns
  the offsets, so nothing needs patching), `--inflight` (8) requests pipelined on one
  connection, until `--bytes` of batches are acknowledged. Every response is decoded and its
  error code checked (a few microseconds against a megabyte).
- fetch: reads back the partition written by `produce`. One Fetch (max_bytes and
  partition_max_bytes `--fetch-max-bytes`, 8 MiB) at offset 0 learns how many records one
  response carries and the high watermark; then fetches at the offsets that walk the log by
  that stride (wrapping to 0 at the end) go out `--inflight` at a time, each request encoded
  once per offset and reused, until `--bytes` of record data came back. Responses are read
  into one preallocated buffer; only the response structure is decoded (records stay a view).
- Broker CPU: utime+stime of `--broker-pid` from /proc/<pid>/stat (all its threads) read just
  before the first request and just after the last response; reported as seconds and as CPU
  seconds per GB (10^9 bytes) moved. The machine's busy CPU (from /proc/stat) over the same
  window is reported too, so load from other processes can be seen (`machine_busy_cores`).
- tcp / sendfile: a sink process (this script, `sink`) accepts one connection and reads into a
  1 MiB buffer until EOF, then answers the byte count; the sender times from connect to that
  answer. sendfile first writes a file of `--bytes` in `--dir` (so it is in the page cache),
  then `os.sendfile`s it in 8 MiB slices.
- write: `os.write` of one 1 MiB buffer, `--bytes` in all, to a new file in `--dir`, then the
  file is deleted (no fsync: the page cache's write bandwidth, as a broker that does not fsync).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import struct
import subprocess
import sys
import time
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from gregor.protocol import api_keys, codec  # noqa: E402
from gregor.protocol.messages import ApiVersionsRequest, FetchRequest, ProduceRequest  # noqa: E402
from gregor.protocol.records.records import build_batch  # noqa: E402

KiB = 1024
MiB = 1024 * KiB
GB = 1_000_000_000
_SIZE = struct.Struct(">i")
_CLK_TCK = os.sysconf("SC_CLK_TCK")

# The highest versions this client would use (Fetch v12 still names topics; v13+ wants ids).
PRODUCE_MAX = 12
FETCH_MAX = 12


# -- /proc ------------------------------------------------------------------------------------


def proc_cpu_times(pid: int) -> tuple[float, float]:
    """(utime, stime) of a process (all its threads), in seconds."""
    with open(f"/proc/{pid}/stat") as f:
        data = f.read()
    fields = data[data.rindex(")") + 2 :].split()
    # fields[0] is state (field 3); utime is field 14, stime field 15 (1-based).
    return int(fields[11]) / _CLK_TCK, int(fields[12]) / _CLK_TCK


def proc_cpu_seconds(pid: int) -> float:
    """utime + stime of a process (all its threads), in seconds."""
    u, s = proc_cpu_times(pid)
    return u + s


def machine_cpu() -> tuple[float, float]:
    """(busy seconds, total seconds) summed over all CPUs since boot, from /proc/stat."""
    with open("/proc/stat") as f:
        parts = f.readline().split()[1:]
    vals = [int(x) for x in parts[:8]]
    idle = vals[3] + vals[4]  # idle + iowait
    total = sum(vals)
    return (total - idle) / _CLK_TCK, total / _CLK_TCK


def cpu_pressure_us() -> int | None:
    """Total microseconds some runnable task waited for a CPU (PSI), or None without PSI."""
    try:
        with open("/proc/pressure/cpu") as f:
            for line in f:
                if line.startswith("some"):
                    return int(line.rsplit("total=", 1)[1])
    except (OSError, ValueError, IndexError):
        pass
    return None


def dirty_mb() -> float | None:
    """Dirty + Writeback page cache, MB (what the kernel still has to write to disk)."""
    try:
        vals = {}
        with open("/proc/meminfo") as f:
            for line in f:
                k, _, v = line.partition(":")
                if k in ("Dirty", "Writeback"):
                    vals[k] = int(v.split()[0])
        return (vals.get("Dirty", 0) + vals.get("Writeback", 0)) / 1024
    except OSError:
        return None


def loadavg() -> list[float]:
    with open("/proc/loadavg") as f:
        return [float(x) for x in f.read().split()[:3]]


class Window:
    """Broker CPU, machine CPU and wall time between start() and stop()."""

    def __init__(self, broker_pid: int | None) -> None:
        self.broker_pid = broker_pid

    def start(self) -> None:
        self.t0 = time.perf_counter()
        self.c0 = time.process_time()
        self.b0 = proc_cpu_times(self.broker_pid) if self.broker_pid else (0.0, 0.0)
        self.m0 = machine_cpu()
        self.p0 = cpu_pressure_us()
        self.d0 = dirty_mb()

    def stop(self) -> dict[str, Any]:
        wall = time.perf_counter() - self.t0
        client = time.process_time() - self.c0
        b1 = proc_cpu_times(self.broker_pid) if self.broker_pid else None
        broker = (b1[0] + b1[1] - self.b0[0] - self.b0[1]) if b1 else None
        m1 = machine_cpu()
        busy = m1[0] - self.m0[0]
        out: dict[str, Any] = {
            "seconds": wall,
            "client_cpu_s": client,
            "broker_cpu_s": broker,
            "machine_busy_cores": busy / wall if wall > 0 else None,
            "loadavg_after": loadavg(),
            "dirty_mb_before": self.d0,
            "dirty_mb_after": dirty_mb(),
        }
        p1 = cpu_pressure_us()
        if p1 is not None and self.p0 is not None and wall > 0:
            out["cpu_pressure"] = (
                (p1 - self.p0) / 1e6 / wall
            )  # share of time some task waited for a CPU
        if b1 is not None:
            out["broker_user_s"] = b1[0] - self.b0[0]
            out["broker_sys_s"] = b1[1] - self.b0[1]
        if broker is not None:
            out["other_cpu_cores"] = max(0.0, (busy - broker - client) / wall) if wall > 0 else None
        return out


# -- a tiny Kafka client ----------------------------------------------------------------------


def _recv_exact(sock: socket.socket, view: memoryview) -> None:
    got, n = 0, len(view)
    while got < n:
        r = sock.recv_into(view[got:], n - got)
        if r == 0:
            raise ConnectionError("broker closed the connection")
        got += r


class RawClient:
    def __init__(self, bootstrap: str, max_response: int = 64 * MiB) -> None:
        host, _, port = bootstrap.rpartition(":")
        self.sock = socket.create_connection((host, int(port)))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = bytearray(max_response)
        self.view = memoryview(self.buf)
        self._hdr = bytearray(4)
        self.versions: dict[int, tuple[int, int]] = {}

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def recv_frame(self) -> memoryview:
        """The next response frame (after its size prefix), as a view into the shared buffer."""
        _recv_exact(self.sock, memoryview(self._hdr))
        (size,) = _SIZE.unpack(self._hdr)
        if size > len(self.buf):
            self.buf = bytearray(size)
            self.view = memoryview(self.buf)
        frame = self.view[:size]
        _recv_exact(self.sock, frame)
        return frame

    def api_versions(self) -> dict[int, tuple[int, int]]:
        body = ApiVersionsRequest(
            client_software_name="gregor-rawload", client_software_version="1"
        )
        self.send(codec.join(codec.encode_request(api_keys.API_VERSIONS, 3, 1, "rawload", body)))
        _, resp = codec.decode_response(api_keys.API_VERSIONS, 3, self.recv_frame())
        if resp.error_code:
            raise RuntimeError(f"ApiVersions failed: error {resp.error_code}")
        self.versions = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}
        return self.versions

    def pick(self, key: int, ours: int) -> int:
        lo, hi = self.versions[key]
        v = min(hi, ours)
        if v < lo:
            raise RuntimeError(f"no common version for API {key}: broker {lo}-{hi}, ours <= {ours}")
        return v

    def close(self) -> None:
        self.sock.close()


def make_batch(total: int, value_bytes: int = 1000) -> bytearray:
    """One batch of exactly `total` bytes: `value_bytes`-byte records, the last one resized."""
    n = max(1, (total - 61) // (value_bytes + 8))
    last = value_bytes
    for _ in range(20):
        records = [(None, b"v" * value_bytes)] * (n - 1) + [(None, b"w" * max(0, last))]
        batch = build_batch(records, base_timestamp=int(time.time() * 1000))
        diff = total - len(batch)
        if diff == 0:
            return batch
        last += diff
        if last < 0:
            n -= 1
            last = value_bytes
    raise RuntimeError(f"could not build a batch of exactly {total} bytes")


# -- produce ----------------------------------------------------------------------------------


def run_produce(args: argparse.Namespace) -> dict[str, Any]:
    client = RawClient(args.bootstrap)
    client.api_versions()
    version = client.pick(api_keys.PRODUCE, PRODUCE_MAX)
    batch = make_batch(args.batch_bytes)
    request = ProduceRequest(
        transactional_id=None,
        acks=1,
        timeout_ms=30000,
        topic_data=[
            ProduceRequest.TopicProduceData(
                name=args.topic,
                partition_data=[
                    ProduceRequest.PartitionProduceData(index=args.partition, records=batch)
                ],
            )
        ],
    )
    data = codec.join(codec.encode_request(api_keys.PRODUCE, version, 7, "rawload", request))
    total_requests = max(1, args.bytes // args.batch_bytes)
    # Warm-up: one request alone, checked (creates the segment, compiles nothing on our side).
    client.send(data)
    _, resp = codec.decode_response(api_keys.PRODUCE, version, client.recv_frame())
    pr = resp.responses[0].partition_responses[0]
    if pr.error_code:
        raise RuntimeError(
            f"produce failed: error {pr.error_code} {getattr(pr, 'error_message', '')}"
        )
    win = Window(args.broker_pid)
    win.start()
    sent = done = errors = 0
    while sent < min(args.inflight, total_requests):
        client.send(data)
        sent += 1
    last_base = -1
    while done < total_requests:
        frame = client.recv_frame()
        done += 1
        if sent < total_requests:
            client.send(data)
            sent += 1
        _, resp = codec.decode_response(api_keys.PRODUCE, version, frame)
        pr = resp.responses[0].partition_responses[0]
        if pr.error_code:
            errors += 1
        else:
            last_base = pr.base_offset
    out = win.stop()
    client.close()
    moved = total_requests * len(batch)
    records_per_batch = struct.unpack_from(">i", batch, 57)[0]
    out.update(
        kind="raw-produce",
        api_version=version,
        requests=total_requests,
        inflight=args.inflight,
        batch_bytes=len(batch),
        records_per_batch=records_per_batch,
        bytes=moved,
        errors=errors,
        last_base_offset=last_base,
        high_watermark=(total_requests + 1) * records_per_batch,
    )
    _rates(out)
    if errors:
        out["error"] = f"{errors} produce responses carried an error"
    return out


def _rates(out: dict[str, Any]) -> None:
    s, moved = out["seconds"], out["bytes"]
    out["mb_per_s"] = moved / s / 1e6 if s > 0 else None
    if out.get("broker_cpu_s") is not None:
        out["broker_cpu_s_per_gb"] = out["broker_cpu_s"] / (moved / GB) if moved else None
        if out.get("broker_user_s") is not None and moved:
            out["broker_user_s_per_gb"] = out["broker_user_s"] / (moved / GB)
            out["broker_sys_s_per_gb"] = out["broker_sys_s"] / (moved / GB)
    out["client_cpu_s_per_gb"] = out["client_cpu_s"] / (moved / GB) if moved else None


# -- fetch ------------------------------------------------------------------------------------


def _records_info(records: Any) -> tuple[int, int]:
    """(bytes, next offset after the last whole batch) of a records view; -1 when empty."""
    if records is None:
        return 0, -1
    mv = memoryview(records)
    n = len(mv)
    pos, nxt = 0, -1
    while n - pos >= 61:
        base, length = struct.unpack_from(">qi", mv, pos)
        if pos + 12 + length > n:
            break
        (delta,) = struct.unpack_from(">i", mv, pos + 23)
        nxt = base + delta + 1
        pos += 12 + length
    return n, nxt


def run_fetch(args: argparse.Namespace) -> dict[str, Any]:
    client = RawClient(args.bootstrap, max_response=args.fetch_max_bytes + 4 * MiB)
    client.api_versions()
    version = client.pick(api_keys.FETCH, FETCH_MAX)
    cache: dict[int, bytes] = {}

    def request(offset: int) -> bytes:
        data = cache.get(offset)
        if data is None:
            body = FetchRequest(
                replica_id=-1,
                max_wait_ms=500,
                min_bytes=1,
                max_bytes=args.fetch_max_bytes,
                isolation_level=0,
                session_id=0,
                session_epoch=-1,
                topics=[
                    FetchRequest.FetchTopic(
                        topic=args.topic,
                        partitions=[
                            FetchRequest.FetchPartition(
                                partition=args.partition,
                                current_leader_epoch=-1,
                                fetch_offset=offset,
                                last_fetched_epoch=-1,
                                log_start_offset=-1,
                                partition_max_bytes=args.fetch_max_bytes,
                            )
                        ],
                    )
                ],
                forgotten_topics_data=[],
                rack_id="",
            )
            data = codec.join(codec.encode_request(api_keys.FETCH, version, 9, "rawload", body))
            cache[offset] = data
        return data

    def parse(frame: memoryview) -> tuple[int, int, int]:
        _, resp = codec.decode_response(api_keys.FETCH, version, frame)
        p = resp.responses[0].partitions[0]
        if p.error_code:
            raise RuntimeError(f"fetch failed: error {p.error_code}")
        nbytes, nxt = _records_info(p.records)
        return nbytes, nxt, p.high_watermark

    # Learn the stride (records per response) and the high watermark.
    client.send(request(0))
    first_bytes, stride, hw = parse(client.recv_frame())
    if stride <= 0 or hw <= 0:
        raise RuntimeError(f"nothing to fetch (hw {hw}, first response {first_bytes} bytes)")
    next_offset = 0

    def advance() -> int:
        nonlocal next_offset
        off = next_offset
        next_offset += stride
        if next_offset >= hw:
            next_offset = 0
        return off

    win = Window(args.broker_pid)
    win.start()
    received = responses = empty = inflight = 0
    frame_bytes = 0
    while inflight < args.inflight:
        client.send(request(advance()))
        inflight += 1
    while inflight:
        frame = client.recv_frame()
        inflight -= 1
        responses += 1
        frame_bytes += len(frame) + 4
        nbytes, _, _ = parse(frame)
        received += nbytes
        if nbytes == 0:
            empty += 1
        if received + (inflight * first_bytes) < args.bytes:
            client.send(request(advance()))
            inflight += 1
    out = win.stop()
    client.close()
    out.update(
        kind="raw-fetch",
        api_version=version,
        inflight=args.inflight,
        fetch_max_bytes=args.fetch_max_bytes,
        responses=responses,
        empty_responses=empty,
        bytes=received,
        wire_bytes=frame_bytes,
        bytes_per_response=received / responses if responses else 0,
        stride_records=stride,
        high_watermark=hw,
    )
    _rates(out)
    return out


# -- the machine's limits ---------------------------------------------------------------------


def run_sink(args: argparse.Namespace) -> None:
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    print(srv.getsockname()[1], flush=True)
    conn, _ = srv.accept()
    buf = bytearray(MiB)
    view = memoryview(buf)
    total = 0
    while True:
        n = conn.recv_into(view)
        if n == 0:
            break
        total += n
    conn.sendall(struct.pack(">q", total))
    conn.close()


def _with_sink(send: Any) -> dict[str, Any]:
    sink = subprocess.Popen(
        [sys.executable, os.path.abspath(__file__), "sink"], stdout=subprocess.PIPE, text=True
    )
    try:
        assert sink.stdout is not None
        port = int(sink.stdout.readline())
        sock = socket.create_connection(("127.0.0.1", port))
        win = Window(None)
        win.start()
        sent = send(sock)
        sock.shutdown(socket.SHUT_WR)
        got = b""
        while len(got) < 8:
            chunk = sock.recv(8 - len(got))
            if not chunk:
                break
            got += chunk
        out = win.stop()
        sock.close()
        (received,) = struct.unpack(">q", got)
        if received != sent:
            out["error"] = f"sink received {received} of {sent} bytes"
        out["bytes"] = sent
        _rates(out)
        return out
    finally:
        sink.wait(30)


def run_tcp(args: argparse.Namespace) -> dict[str, Any]:
    buf = os.urandom(MiB)
    n = max(1, args.bytes // MiB)

    def send(sock: socket.socket) -> int:
        for _ in range(n):
            sock.sendall(buf)
        return n * MiB

    out = _with_sink(send)
    out["kind"] = "loopback-tcp"
    return out


def run_sendfile(args: argparse.Namespace) -> dict[str, Any]:
    path = os.path.join(args.dir, f"rawload-sendfile-{os.getpid()}.bin")
    buf = os.urandom(MiB)
    n = max(1, args.bytes // MiB)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        for _ in range(n):
            os.write(fd, buf)
        size = n * MiB

        def send(sock: socket.socket) -> int:
            pos = 0
            out_fd = sock.fileno()
            while pos < size:
                sent = os.sendfile(out_fd, fd, pos, min(8 * MiB, size - pos))
                if sent == 0:
                    break
                pos += sent
            return pos

        out = _with_sink(send)
    finally:
        os.close(fd)
        os.unlink(path)
    out["kind"] = "sendfile"
    return out


def run_write(args: argparse.Namespace) -> dict[str, Any]:
    path = os.path.join(args.dir, f"rawload-write-{os.getpid()}.bin")
    buf = os.urandom(MiB)
    n = max(1, args.bytes // MiB)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        win = Window(None)
        win.start()
        for _ in range(n):
            os.write(fd, buf)
        out = win.stop()
    finally:
        os.close(fd)
        os.unlink(path)
    out.update(kind="page-cache-write", bytes=n * MiB)
    _rates(out)
    return out


# -- command line -----------------------------------------------------------------------------


def parse_size(text: str) -> int:
    t = text.strip().lower()
    for suffix, mult in (
        ("gib", 1 << 30),
        ("mib", 1 << 20),
        ("kib", 1 << 10),
        ("g", 1 << 30),
        ("m", 1 << 20),
        ("k", 1 << 10),
    ):
        if t.endswith(suffix):
            return int(float(t[: -len(suffix)]) * mult)
    return int(t)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name in ("produce", "fetch"):
        p = sub.add_parser(name)
        p.add_argument("--bootstrap", required=True)
        p.add_argument("--topic", required=True)
        p.add_argument("--partition", type=int, default=0)
        p.add_argument("--bytes", type=parse_size, default=1 << 30)
        p.add_argument("--inflight", type=int, default=8)
        p.add_argument("--broker-pid", type=int)
        p.add_argument("--batch-bytes", type=parse_size, default=MiB)
        p.add_argument("--fetch-max-bytes", type=parse_size, default=8 * MiB)
    sub.add_parser("sink")
    p = sub.add_parser("tcp")
    p.add_argument("--bytes", type=parse_size, default=1 << 30)
    for name in ("sendfile", "write"):
        p = sub.add_parser(name)
        p.add_argument("--dir", required=True)
        p.add_argument("--bytes", type=parse_size, default=1 << 30)
    args = ap.parse_args(argv)
    if args.cmd == "sink":
        run_sink(args)
        return 0
    fn = {
        "produce": run_produce,
        "fetch": run_fetch,
        "tcp": run_tcp,
        "sendfile": run_sendfile,
        "write": run_write,
    }[args.cmd]
    try:
        out = fn(args)
    except Exception as exc:  # report, don't hide: the orchestrator records the error
        out = {"kind": args.cmd, "error": f"{type(exc).__name__}: {exc}"}
    print(json.dumps(out), flush=True)
    return 0 if "error" not in out else 1


if __name__ == "__main__":
    sys.exit(main())
