#!/usr/bin/env python
"""Storage engine figures: append throughput against a plain write loop, and read-slice lookups.

    python bench/storage_bench.py            # the full run (~1 GiB per case; a few minutes)
    python bench/storage_bench.py --quick    # a smoke run with small sizes (seconds)
    python bench/storage_bench.py --dir /some/where   # where the temporary files go

Prints figures; asserts nothing about time. The full run writes them to
`bench/results/storage-<date>.md` (a markdown table followed by the same figures as JSON) and
`bench/results/storage-<date>.json`; `--quick` writes `storage-<date>-quick.*`.

1. Append: `Log.append` of one prebuilt batch per call (1 KiB, 16 KiB, 1 MiB batches) into the
   page cache (default LogConfig, segment.bytes 1 GiB, no fsync), then right after it a plain
   `os.write` loop writing the same buffers in the same sizes, the same number of times, to a
   file in the same directory. Batches are built before timing; `Log.append` patches headers in
   place, so both loops cycle through the same pool of prebuilt bytearrays. Each case writes
   `--bytes` (1 GiB) or stops after `--seconds` (5 s), whichever comes first; files are deleted
   between cases. Goal: 16 KiB appends >= 70% of the plain loop.
2. Read: a partition of `--read-bytes` (1 GiB) of 1 KiB (the worst case for scanning) or 16 KiB
   batches, then `Log.read(offset, max_bytes=1 MiB)` at pre-generated uniformly random offsets,
   and at random offsets in the last 1% of the log (where consumers mostly read).
   Goal: >= 100,000 lookups/s.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import gc
import json
import os
import platform
import random
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from gregor.protocol.records import batch as rb  # noqa: E402
from gregor.protocol.records.records import build_batch  # noqa: E402
from gregor.storage.config import LogConfig  # noqa: E402
from gregor.storage.log import Log  # noqa: E402

KiB = 1024
MiB = 1024 * KiB
GiB = 1024 * MiB

APPEND_GOAL = 0.70  # append / plain at 16 KiB
READ_GOAL = 100_000  # lookups/s
# At most this much in the pool of prebuilt buffers: cache-sized, like a just-received request.
POOL_BYTES = 4 * MiB


def human(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def size_label(n: int) -> str:
    if n % MiB == 0:
        return f"{n // MiB} MiB"
    if n % KiB == 0:
        return f"{n // KiB} KiB"
    return f"{n} B"


# -- batches ----------------------------------------------------------------------------------


def make_batch(size: int, value_bytes: int, seed: int = 0) -> bytearray:
    """One signed v2 batch of exactly `size` bytes: records of `value_bytes`-byte values, the
    last one padded (or shortened) to land on `size`."""
    rnd = random.Random(seed)
    one = len(build_batch([(None, bytes(value_bytes))])) - rb.HEADER_SIZE  # bytes per record
    n = max(1, (size - rb.HEADER_SIZE) // one)
    values = [rnd.randbytes(value_bytes) for _ in range(n)]
    for _ in range(16):
        batch = build_batch([(None, v) for v in values], base_timestamp=1_700_000_000_000)
        diff = size - len(batch)
        if diff == 0:
            return batch
        last = len(values[-1]) + diff
        if last < 0:
            del values[-(-diff // one + 1) :]
            if not values:
                break
            continue
        # Shrinking a value can shrink its length varint too: aim a little low and repeat.
        values[-1] = rnd.randbytes(max(0, last))
    raise RuntimeError(f"could not build a batch of exactly {size} bytes")


def make_pool(size: int, value_bytes: int) -> list[bytearray]:
    """Copies of one batch, as many as fit POOL_BYTES (4 to 64)."""
    proto = make_batch(size, value_bytes)
    count = max(4, min(64, POOL_BYTES // size))
    return [bytearray(proto) for _ in range(count)]


# -- environment ------------------------------------------------------------------------------


def _mount_of(path: str) -> dict[str, str]:
    path = os.path.realpath(path)
    best: dict[str, str] = {}
    try:
        with open("/proc/mounts") as f:
            for line in f:
                dev, mnt, fstype = line.split()[:3]
                if (path == mnt or path.startswith(mnt.rstrip("/") + "/")) and len(mnt) >= len(
                    best.get("mount", "")
                ):
                    best = {"device": dev, "mount": mnt, "fstype": fstype}
    except OSError:
        pass
    return best


def _mem_total() -> int | None:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "?"


def _git_rev() -> str | None:
    try:
        out = subprocess.run(
            ["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            timeout=5,
        )
        return out.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def _loadavg() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:  # pragma: no cover
        return None


def environment(bench_dir: str) -> dict:
    try:
        import crc32c

        crc_hw = bool(getattr(crc32c, "hardware_based", False))
        crc_ver = getattr(crc32c, "__version__", "?")
    except ImportError:  # pragma: no cover
        crc_hw, crc_ver = False, None
    usage = shutil.disk_usage(bench_dir)
    try:
        affinity = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover
        affinity = None
    return {
        "cpu_count": os.cpu_count(),
        "cpu_affinity": affinity,
        "cpu_model": _cpu_model(),
        "memory_bytes": _mem_total(),
        "python": sys.version.split()[0],
        "python_impl": platform.python_implementation(),
        "platform": platform.platform(),
        "crc32c": crc_ver,
        "crc32c_hardware": crc_hw,
        "bench_dir": bench_dir,
        "disk": _mount_of(bench_dir),
        "disk_free_bytes": usage.free,
        "disk_total_bytes": usage.total,
        "git_rev": _git_rev(),
        "loadavg_before": _loadavg(),
    }


# -- 1. append --------------------------------------------------------------------------------


def warm_pages(base_dir: str, nbytes: int) -> None:
    """Write and delete a scratch file of `nbytes`, so that the next `nbytes` of page cache come
    from pages the machine has just used.

    On a VM that hands free guest memory back to its host (free page reporting, a balloon), the
    first touch of a page that sat free for a couple of seconds costs a host fault: writing into
    such pages ran ~10x slower than into recently used ones here, and hit whichever loop ran first.
    Every timed round is preceded by this, so both loops write into equally warm memory.
    """
    path = os.path.join(base_dir, "warm.scratch")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        left = nbytes
        while left > 0:
            left -= os.write(fd, _ZEROS[: min(left, len(_ZEROS))])
    finally:
        os.close(fd)
        os.unlink(path)


_ZEROS = bytes(MiB)


def _median(xs: list[float]) -> float:
    xs = sorted(xs)
    mid = len(xs) // 2
    return xs[mid] if len(xs) % 2 else (xs[mid - 1] + xs[mid]) / 2


def bench_append(
    base_dir: str,
    size: int,
    target_bytes: int,
    max_seconds: float,
    value_bytes: int,
    round_bytes: int,
) -> dict:
    """Log.append of `size`-byte batches against the plain os.write loop.

    Timed in rounds of `round_bytes`: a round of Log.append, then right after it the same round
    (the same buffers, the same sizes, the same count) of os.write to a plain file in the same
    directory, each preceded by `warm_pages` (untimed). Pairing the rounds keeps the ratio honest
    on a shared, noisy machine: a slow spell hits both sides of a pair. Rounds go on until
    `target_bytes` are written or `max_seconds` of timed appends have passed; then both files
    are deleted."""
    pool = make_pool(size, value_bytes)
    npool = len(pool)
    total = max(1, target_bytes // size)
    per_round = max(1, round_bytes // size)
    config = dataclasses.replace(LogConfig(), segment_bytes=1 * GiB)
    log = Log.open(os.path.join(base_dir, f"append-{size}-0"), config)
    append = log.append
    path = os.path.join(base_dir, f"plain-{size}.bin")
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
    write = os.write

    rounds: list[int] = []
    append_times: list[float] = []
    plain_times: list[float] = []
    append_cpu = plain_cpu = 0.0  # process CPU time (user + system): less hurt by other load
    cpu = time.process_time
    done = 0
    while done < total and sum(append_times) < max_seconds:
        n = min(per_round, total - done)
        warm_pages(base_dir, n * size + 8 * MiB)
        gc.collect()
        i = 0
        c0 = cpu()
        t0 = time.perf_counter()
        for _ in range(n):
            append(pool[i])
            i += 1
            if i == npool:
                i = 0
        append_times.append(time.perf_counter() - t0)
        append_cpu += cpu() - c0

        warm_pages(base_dir, n * size + 8 * MiB)
        gc.collect()
        i = 0
        c0 = cpu()
        t0 = time.perf_counter()
        for _ in range(n):
            write(fd, pool[i])
            i += 1
            if i == npool:
                i = 0
        plain_times.append(time.perf_counter() - t0)
        plain_cpu += cpu() - c0
        rounds.append(n)
        done += n
    written = os.fstat(fd).st_size
    os.close(fd)
    os.unlink(path)
    assert written == done * size and log.size_in_bytes == done * size
    segments = len(log.segments)
    log.close_handles()
    log.delete()

    t_append, t_plain = sum(append_times), sum(plain_times)
    nbytes = done * size
    full = [k for k, n in enumerate(rounds) if n == rounds[0]]
    round_mb = rounds[0] * size / 1e6
    return {
        "batch_bytes": size,
        "batches": done,
        "bytes": nbytes,
        "rounds": len(rounds),
        "round_bytes": rounds[0] * size,
        "segments": segments,
        "append_seconds": t_append,
        "append_mb_s": nbytes / t_append / 1e6,
        "append_batches_s": done / t_append,
        "append_us_per_batch": t_append / done * 1e6,
        "append_round_mb_s": [round(round_mb / append_times[k], 1) for k in full],
        "append_median_round_mb_s": _median([round_mb / append_times[k] for k in full]),
        "plain_seconds": t_plain,
        "plain_mb_s": nbytes / t_plain / 1e6,
        "plain_batches_s": done / t_plain,
        "plain_us_per_batch": t_plain / done * 1e6,
        "plain_round_mb_s": [round(round_mb / plain_times[k], 1) for k in full],
        "plain_median_round_mb_s": _median([round_mb / plain_times[k] for k in full]),
        "ratio": t_plain / t_append,
        "median_round_ratio": _median([plain_times[k] / append_times[k] for k in full]),
        "append_cpu_us_per_batch": append_cpu / done * 1e6,
        "plain_cpu_us_per_batch": plain_cpu / done * 1e6,
        "cpu_ratio": plain_cpu / append_cpu if append_cpu else None,
    }


# -- 2. read ----------------------------------------------------------------------------------


def build_partition(
    base_dir: str, size: int, target_bytes: int, value_bytes: int
) -> tuple[Log, float, float]:
    """A partition of `target_bytes` of `size`-byte batches, appended ~1 MiB per call, then
    flushed (untimed): the reads then meet a log at rest, as most of a partition is, rather
    than the kernel writing a fresh GiB back under them. (seconds to build, to flush)"""
    proto = make_batch(size, value_bytes)
    per_call = max(1, MiB // size)
    chunk = bytearray(proto * per_call)
    config = dataclasses.replace(LogConfig(), segment_bytes=1 * GiB)
    log = Log.open(os.path.join(base_dir, f"read-{size}-0"), config)
    total = max(1, target_bytes // size)
    t0 = time.perf_counter()
    done = 0
    while done < total:
        n = min(per_call, total - done)
        log.append(chunk if n == per_call else bytearray(proto * n))
        done += n
    built = time.perf_counter() - t0
    log.flush()
    return log, built, time.perf_counter() - t0 - built


READ_SLICES = 10


def time_reads(log: Log, offsets: list[int], max_bytes: int) -> dict:
    """Log.read at each offset, timed in READ_SLICES slices: overall and median-slice rate, and
    (from an untimed sample) what the reads returned."""
    read = log.read
    step = max(1, len(offsets) // READ_SLICES)
    times = []
    gc.collect()
    cpu = 0.0
    for k in range(0, len(offsets), step):
        part = offsets[k : k + step]
        c0 = time.process_time()
        t0 = time.perf_counter()
        for off in part:
            read(off, max_bytes)
        times.append((len(part), time.perf_counter() - t0))
        cpu += time.process_time() - c0
    nbytes = nones = 0
    sample = offsets[:2000]
    for off in sample:
        s = read(off, max_bytes)
        if s is None:
            nones += 1
        else:
            nbytes += s.length
    secs = sum(t for _, t in times)
    return {
        "lookups_s": len(offsets) / secs,
        "us_per_lookup": secs / len(offsets) * 1e6,
        "median_slice_lookups_s": _median([n / t for n, t in times]),
        "cpu_lookups_s": len(offsets) / cpu if cpu else None,
        "avg_slice_bytes": nbytes / max(1, len(sample) - nones),
        "none": nones,
    }


def bench_read(
    base_dir: str, size: int, target_bytes: int, lookups: int, value_bytes: int, max_bytes: int
) -> dict:
    log, build_s, flush_s = build_partition(base_dir, size, target_bytes, value_bytes)
    lso, leo = log.log_start_offset, log.log_end_offset
    rnd = random.Random(42)
    uniform = [rnd.randrange(lso, leo) for _ in range(lookups)]
    tail_from = leo - max(1, (leo - lso) // 100)
    tail = [rnd.randrange(tail_from, leo) for _ in range(lookups)]
    out: dict = {
        "batch_bytes": size,
        "partition_bytes": log.size_in_bytes,
        "segments": len(log.segments),
        "log_end_offset": leo,
        "offset_index_entries": sum(s.offset_index.entries for s in log.segments),
        "build_seconds": build_s,
        "flush_seconds": flush_s,
        "max_bytes": max_bytes,
        "lookups": lookups,
    }
    for name, offsets in (("random", uniform), ("tail", tail)):
        for key, value in time_reads(log, offsets, max_bytes).items():
            out[f"{name}_{key}"] = value
    log.close_handles()
    log.delete()
    return out


# -- reporting --------------------------------------------------------------------------------


def markdown(result: dict) -> str:
    env = result["env"]
    p = result["params"]
    lines = [
        f"# Storage bench {result['date']}{' (quick)' if p['quick'] else ''}",
        "",
        f"`{result['command']}`",
        "",
        f"{env['cpu_count']} CPUs ({env['cpu_model']}), Python {env['python']}, "
        f"{env['disk'].get('fstype', '?')} on {env['disk'].get('device', '?')}, "
        f"{human(env['disk_free_bytes'])} free, crc32c hardware={env['crc32c_hardware']}, "
        f"git {env['git_rev'] or '-'}; load average {env['loadavg_before']} before, "
        f"{result.get('loadavg_after')} after (other work on the machine shows up here)",
        "",
        "## Append (page cache, no fsync) vs a plain os.write loop",
        "",
        "MB = 10^6 bytes. Rounds of Log.append and os.write alternate (see the script); the median",
        "columns are over the rounds, the rest over the whole case.",
        "",
        "| batch | batches | MB written | Log.append MB/s | batches/s | µs/batch | os.write MB/s | batches/s | µs/batch | append/plain | median round | CPU µs append / plain | CPU ratio |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in result["append"]:
        lines.append(
            f"| {size_label(r['batch_bytes'])} | {r['batches']:,} | {r['bytes'] / 1e6:,.0f} "
            f"| {r['append_mb_s']:,.0f} | {r['append_batches_s']:,.0f} | {r['append_us_per_batch']:.2f} "
            f"| {r['plain_mb_s']:,.0f} | {r['plain_batches_s']:,.0f} | {r['plain_us_per_batch']:.2f} "
            f"| {r['ratio']:.0%} | {r['median_round_ratio']:.0%} "
            f"| {r['append_cpu_us_per_batch']:.2f} / {r['plain_cpu_us_per_batch']:.2f} | {r['cpu_ratio']:.0%} |"
        )
    lines += [
        "",
        f"## Log.read(offset, max_bytes={size_label(p['max_bytes'])}) lookups/s",
        "",
        "Wall-clock rates, the median of 10 slices, and the rate by process CPU time (user + system),",
        "which other load on a shared machine hurts less.",
        "",
        "| batch | partition | offsets | index entries | random lookups/s | µs | median slice/s | CPU-time/s | tail 1% lookups/s | µs | median slice/s | CPU-time/s |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in result["read"]:
        lines.append(
            f"| {size_label(r['batch_bytes'])} | {human(r['partition_bytes'])} | {r['log_end_offset']:,} "
            f"| {r['offset_index_entries']:,} | {r['random_lookups_s']:,.0f} | {r['random_us_per_lookup']:.2f} "
            f"| {r['random_median_slice_lookups_s']:,.0f} | {r['random_cpu_lookups_s']:,.0f} "
            f"| {r['tail_lookups_s']:,.0f} | {r['tail_us_per_lookup']:.2f} | {r['tail_median_slice_lookups_s']:,.0f} "
            f"| {r['tail_cpu_lookups_s']:,.0f} |"
        )
    lines += ["", "## Goals", ""]
    for g in result["goals"]:
        lines.append(f"- {g['goal']}: {g['value']} — {'met' if g['met'] else 'MISSED'}")
    lines += ["", "## Figures (JSON)", "", "```json", json.dumps(result, indent=2), "```", ""]
    return "\n".join(lines)


def goals(result: dict) -> list[dict]:
    out = []
    for r in result["append"]:
        if r["batch_bytes"] == 16 * KiB:
            out.append(
                {
                    "goal": f"16 KiB Log.append >= {APPEND_GOAL:.0%} of the plain os.write loop",
                    "value": f"{r['ratio']:.0%} (median round {r['median_round_ratio']:.0%}, CPU time {r['cpu_ratio']:.0%})",
                    "met": r["ratio"] >= APPEND_GOAL,
                }
            )
    for r in result["read"]:
        for name in ("random", "tail"):
            v = r[f"{name}_lookups_s"]
            out.append(
                {
                    "goal": f"{size_label(r['batch_bytes'])} batches, {name} Log.read >= {READ_GOAL:,} lookups/s",
                    "value": f"{v:,.0f}/s (by CPU time {r[f'{name}_cpu_lookups_s']:,.0f}/s)",
                    "met": v >= READ_GOAL,
                }
            )
    return out


def parse_sizes(text: str) -> list[int]:
    out = []
    for part in text.split(","):
        part = part.strip().lower()
        mult = 1
        for suffix, m in (("kib", KiB), ("k", KiB), ("mib", MiB), ("m", MiB)):
            if part.endswith(suffix):
                part, mult = part[: -len(suffix)], m
                break
        out.append(int(part) * mult)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="a short smoke run (small sizes)")
    ap.add_argument(
        "--dir", help="parent of the temporary directory (default: the current directory)"
    )
    ap.add_argument("--bytes", type=int, help="bytes per append case (default 1 GiB; quick 32 MiB)")
    ap.add_argument("--seconds", type=float, help="time cap per append case (default 5; quick 1)")
    ap.add_argument(
        "--round-bytes", type=int, help="bytes per timed round (default 64 MiB; quick 8 MiB)"
    )
    ap.add_argument(
        "--read-bytes", type=int, help="partition size for reads (default 1 GiB; quick 32 MiB)"
    )
    ap.add_argument("--lookups", type=int, help="reads per read case (default 200000; quick 5000)")
    ap.add_argument("--append-sizes", default="1k,16k,1m", help="batch sizes for the append cases")
    ap.add_argument("--read-sizes", default="1k,16k", help="batch sizes for the read cases")
    ap.add_argument("--value-bytes", type=int, default=100, help="record value size inside batches")
    ap.add_argument("--skip-append", action="store_true")
    ap.add_argument("--skip-read", action="store_true")
    ap.add_argument(
        "--results", default=os.path.join(ROOT, "bench", "results"), help="where to write figures"
    )
    ap.add_argument("--no-save", action="store_true", help="print only")
    args = ap.parse_args(argv)

    q = args.quick
    target = args.bytes or (32 * MiB if q else 1 * GiB)
    seconds = args.seconds or (1.0 if q else 5.0)
    read_bytes = args.read_bytes or (32 * MiB if q else 1 * GiB)
    lookups = args.lookups or (5000 if q else 200_000)
    max_bytes = 1 * MiB
    round_bytes = args.round_bytes or (8 * MiB if q else 64 * MiB)

    parent = os.path.abspath(args.dir or os.getcwd())
    os.makedirs(parent, exist_ok=True)
    bench_dir = tempfile.mkdtemp(prefix=".storage-bench-", dir=parent)
    now = dt.datetime.now()
    result: dict = {
        "date": now.strftime("%Y-%m-%d %H:%M:%S"),
        "command": "python "
        + " ".join(
            [os.path.relpath(__file__, ROOT)] + (argv if argv is not None else sys.argv[1:])
        ),
        "params": {
            "quick": q,
            "append_target_bytes": target,
            "append_max_seconds": seconds,
            "append_round_bytes": round_bytes,
            "read_partition_bytes": read_bytes,
            "lookups": lookups,
            "max_bytes": max_bytes,
            "value_bytes": args.value_bytes,
            "segment_bytes": 1 * GiB,
            "leader_epoch": "default (-1: no epoch patch)",
        },
        "env": environment(bench_dir),
        "append": [],
        "read": [],
    }
    env = result["env"]
    print(f"storage bench {'(quick) ' if q else ''}in {bench_dir}")
    print(
        f"  {env['cpu_count']} CPUs (affinity {env['cpu_affinity']}), {env['cpu_model']}; "
        f"memory {human(env['memory_bytes'] or 0)}"
    )
    print(f"  Python {env['python']} ({env['python_impl']}), {env['platform']}")
    print(
        f"  disk {env['disk'].get('device', '?')} {env['disk'].get('fstype', '?')} at "
        f"{env['disk'].get('mount', '?')}: {human(env['disk_free_bytes'])} free of {human(env['disk_total_bytes'])}"
    )
    print(
        f"  crc32c {env['crc32c']} hardware={env['crc32c_hardware']}; git {env['git_rev'] or '-'}"
    )
    print(
        f"  load average {env['loadavg_before']} (the machine may be shared: load above 0 skews figures)"
    )
    need = max(target, read_bytes) + 64 * MiB
    if env["disk_free_bytes"] < need:
        print(f"not enough free disk: need {human(need)}", file=sys.stderr)
        shutil.rmtree(bench_dir, ignore_errors=True)
        return 2

    try:
        if not args.skip_append:
            print(
                f"\n1. append: up to {human(target)} or {seconds:g} s of appends per case, in rounds of "
                f"{human(round_bytes)}, each followed by the same round of plain os.write (MB = 10^6 B)"
            )
            print(
                f"   {'batch':>7} {'batches':>10} {'append MB/s':>12} {'batches/s':>11} {'µs':>7}"
                f" {'plain MB/s':>11} {'batches/s':>11} {'µs':>7} {'ratio':>6} {'median':>6}"
                f" {'CPU µs append/plain':>20} {'CPU ratio':>9}"
            )
            for size in parse_sizes(args.append_sizes):
                r = bench_append(bench_dir, size, target, seconds, args.value_bytes, round_bytes)
                result["append"].append(r)
                print(
                    f"   {size_label(size):>7} {r['batches']:>10,} {r['append_mb_s']:>12,.0f} {r['append_batches_s']:>11,.0f}"
                    f" {r['append_us_per_batch']:>7.2f} {r['plain_mb_s']:>11,.0f} {r['plain_batches_s']:>11,.0f}"
                    f" {r['plain_us_per_batch']:>7.2f} {r['ratio']:>6.0%} {r['median_round_ratio']:>6.0%}"
                    f" {r['append_cpu_us_per_batch']:>10.2f}/{r['plain_cpu_us_per_batch']:<9.2f} {r['cpu_ratio']:>9.0%}",
                    flush=True,
                )
        if not args.skip_read:
            print(
                f"\n2. read: Log.read(offset, max_bytes={size_label(max_bytes)}) on a {human(read_bytes)} partition, "
                f"{lookups:,} pre-generated offsets"
            )
            print(
                f"   {'batch':>7} {'offsets':>11} {'idx entries':>11} {'build s':>8}"
                f" {'random/s':>10} {'µs':>6} {'median':>8} {'CPU/s':>8} {'tail 1%/s':>10} {'µs':>6} {'median':>8}"
                f" {'CPU/s':>8} {'avg slice':>10}"
            )
            for size in parse_sizes(args.read_sizes):
                r = bench_read(bench_dir, size, read_bytes, lookups, args.value_bytes, max_bytes)
                result["read"].append(r)
                print(
                    f"   {size_label(size):>7} {r['log_end_offset']:>11,} {r['offset_index_entries']:>11,}"
                    f" {r['build_seconds']:>8.1f} {r['random_lookups_s']:>10,.0f} {r['random_us_per_lookup']:>6.2f}"
                    f" {r['random_median_slice_lookups_s']:>8,.0f} {r['random_cpu_lookups_s']:>8,.0f}"
                    f" {r['tail_lookups_s']:>10,.0f} {r['tail_us_per_lookup']:>6.2f} {r['tail_median_slice_lookups_s']:>8,.0f}"
                    f" {r['tail_cpu_lookups_s']:>8,.0f}"
                    f" {human(r['random_avg_slice_bytes']):>10}",
                    flush=True,
                )
    finally:
        shutil.rmtree(bench_dir, ignore_errors=True)
    result["loadavg_after"] = _loadavg()

    result["goals"] = goals(result)
    print("\ngoals:")
    for g in result["goals"]:
        print(f"  {'met   ' if g['met'] else 'MISSED'} {g['goal']}: {g['value']}")
    print(f"load average after: {result['loadavg_after']}")

    if not args.no_save:
        os.makedirs(args.results, exist_ok=True)
        stem = os.path.join(args.results, f"storage-{now:%Y-%m-%d}{'-quick' if q else ''}")
        with open(stem + ".md", "w") as f:
            f.write(markdown(result))
        with open(stem + ".json", "w") as f:
            json.dump(result, f, indent=2)
            f.write("\n")
        print(f"\nwrote {os.path.relpath(stem, os.getcwd())}.md and .json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
