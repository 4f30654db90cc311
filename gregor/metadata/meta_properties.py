"""`meta.properties`: the cluster and node a log directory belongs to, in Kafka's KRaft format.

    #
    #Thu Sep 12 10:15:02 UTC 2024
    version=1
    cluster.id=J8qXRwI-Qyi2G0guFTiuYw
    node.id=1
    directory.id=6BYgZ8TvTkW1cY3VtJ7f3w

A Java properties file (`key=value` lines, `#` comments). Version 1 is KRaft's: cluster.id and
node.id are required; directory.id (KIP-858) names this one directory and differs in each.
Version 0 (ZooKeeper-era, `broker.id`) is refused: gregor never wrote it.

Every log dir holds one. `ensure` runs at each start: the files found must agree with each other
and with the configured node.id (and cluster.id, when configured); a disagreement is a
`MetaPropertiesError` naming the file. Dirs without one (a first start, a new dir added to
log.dirs) get one written: the cluster id already found, else the configured one, else the one
the caller brings (a pre-KRaft data dir's), else a new random one, but only for a node on its
own: one that joins other nodes must be formatted or configured with their id, as in Kafka. `gregor storage format` writes
them ahead of time (`format_dirs`). Writes go to a temp file, are fsynced, then renamed.

Ids are Kafka's `Uuid` strings: 16 random bytes in URL-safe base64 without padding (22
characters). Kafka never hands out the ids below 100 (reserved) nor ones whose string starts with
"-" (a command line would read them as an option); neither do we.
"""

from __future__ import annotations

import base64
import binascii
import os
import secrets
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from gregor.clock import SYSTEM_CLOCK, Clock
from gregor.storage.checkpoints import fsync_dir

FILE_NAME = "meta.properties"
VERSION = 1
RESERVED_BELOW = 100  # ids 0..99 are Kafka's reserved directory ids (unassigned, lost, ...)


class MetaPropertiesError(RuntimeError):
    """A log dir that does not belong to this node or cluster, or an unreadable meta.properties."""


def uuid_to_str(u: uuid.UUID) -> str:
    return base64.urlsafe_b64encode(u.bytes).decode("ascii").rstrip("=")


def uuid_from_str(text: str) -> uuid.UUID:
    """Kafka's Uuid string form -> uuid.UUID; ValueError if it is not 22 characters of 16 bytes."""
    if len(text) != 22:
        raise ValueError(f"{text!r} is not a Kafka uuid: 22 base64 characters expected")
    try:
        raw = base64.urlsafe_b64decode(text + "==")
    except (binascii.Error, ValueError):
        raise ValueError(f"{text!r} is not a Kafka uuid: not URL-safe base64") from None
    if len(raw) != 16 or uuid_to_str(uuid.UUID(bytes=raw)) != text:
        raise ValueError(f"{text!r} is not a Kafka uuid")
    return uuid.UUID(bytes=raw)


def random_uuid() -> uuid.UUID:
    while True:
        u = uuid.UUID(bytes=secrets.token_bytes(16))
        if u.int >= RESERVED_BELOW and not uuid_to_str(u).startswith("-"):
            return u


def random_id() -> str:
    """A new cluster or directory id, as `kafka-storage random-uuid` prints one."""
    return uuid_to_str(random_uuid())


@dataclass(frozen=True)
class MetaProperties:
    cluster_id: str
    node_id: int
    directory_id: uuid.UUID | None = None
    version: int = VERSION


def path_of(log_dir: str) -> str:
    return os.path.join(log_dir, FILE_NAME)


def _parse(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        for i, ch in enumerate(line):
            if ch in "=:":
                out[line[:i].strip()] = (
                    line[i + 1 :].strip().replace("\\:", ":").replace("\\=", "=")
                )
                break
        else:
            out[line] = ""
    return out


def read(log_dir: str) -> MetaProperties | None:
    """The dir's meta.properties, None if it has none."""
    path = path_of(log_dir)
    try:
        with open(path, encoding="utf-8") as f:
            props = _parse(f.read())
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise MetaPropertiesError(f"cannot read {path}: {exc}") from None
    version = props.get("version", "0")
    if version != str(VERSION):
        raise MetaPropertiesError(
            f"{path} is version {version}; gregor reads only version {VERSION} (KRaft). A "
            "ZooKeeper-era log dir has to be migrated by Kafka first."
        )
    cluster_id = props.get("cluster.id")
    if not cluster_id:
        raise MetaPropertiesError(f"{path} has no cluster.id")
    node = props.get("node.id", "")
    try:
        node_id = int(node)
    except ValueError:
        raise MetaPropertiesError(f"{path}: node.id {node!r} is not a number") from None
    directory_id = None
    if props.get("directory.id"):
        try:
            directory_id = uuid_from_str(props["directory.id"])
        except ValueError as exc:
            raise MetaPropertiesError(f"{path}: directory.id: {exc}") from None
    return MetaProperties(cluster_id, node_id, directory_id)


def write(log_dir: str, meta: MetaProperties, clock: Clock = SYSTEM_CLOCK) -> None:
    written = time.localtime(clock.now_ms() / 1000)
    lines = [
        "#",
        "#" + time.strftime("%a %b %d %H:%M:%S %Z %Y", written),
        f"version={meta.version}",
    ]
    lines += [f"cluster.id={meta.cluster_id}", f"node.id={meta.node_id}"]
    if meta.directory_id is not None:
        lines.append(f"directory.id={uuid_to_str(meta.directory_id)}")
    path = path_of(log_dir)
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(log_dir)


def ensure(
    log_dirs: Sequence[str],
    node_id: int,
    cluster_id: str | None = None,
    fallback_cluster_id: str | None = None,
    joins_quorum: str | None = None,
) -> dict[str, MetaProperties]:
    """Check every dir's meta.properties and write the missing ones (the module docstring).

    `cluster_id`: the configured one (cluster.id), which the files must match. The result maps
    each log dir to its properties. `joins_quorum`: the setting by which the node joins other
    nodes (controller.quorum.voters=...); such a node never makes up a cluster id (it would form
    no cluster with its peers): with none found nor configured, MetaPropertiesError."""
    found: dict[str, MetaProperties] = {}
    for d in log_dirs:
        meta = read(d)
        if meta is not None:
            found[d] = meta
    expected = cluster_id
    seen_dirs: dict[uuid.UUID, str] = {}
    for d, meta in found.items():
        path = path_of(d)
        if expected is None:
            expected = meta.cluster_id
        elif meta.cluster_id != expected:
            source = "cluster.id is configured as" if cluster_id else "the other log dirs say"
            raise MetaPropertiesError(
                f"{path} says cluster.id={meta.cluster_id}, but {source} {expected}: this log "
                "dir belongs to another cluster. Point log.dirs at this cluster's data, or empty "
                "the dir to start it afresh."
            )
        if meta.node_id != node_id:
            raise MetaPropertiesError(
                f"{path} says node.id={meta.node_id}, but this node is node.id={node_id}. If "
                f"the data moved here, configure node.id={meta.node_id}; to start a new node, "
                "empty the log dirs."
            )
        if meta.directory_id is not None:
            other = seen_dirs.setdefault(meta.directory_id, d)
            if other != d:
                raise MetaPropertiesError(
                    f"{path} has the same directory.id as {path_of(other)}: each log dir needs "
                    "its own (was one copied over the other?)"
                )
    if expected is None and fallback_cluster_id is None and joins_quorum:
        raise MetaPropertiesError(
            f"{log_dirs[0]} is not formatted (no {FILE_NAME}) and cluster.id is not set: this "
            f"node joins a quorum ({joins_quorum}) and must share its cluster's id; run `gregor "
            f"storage format --cluster-id ID --data-dir {','.join(log_dirs)} --node-id "
            f"{node_id}` (ID: the cluster's, or a new one from `gregor storage random-uuid`), or "
            "set cluster.id=ID"
        )
    if expected is None:
        expected = fallback_cluster_id or random_id()
    out = {}
    for d in log_dirs:
        meta = found.get(d)
        if meta is None:
            meta = MetaProperties(expected, node_id, _new_directory_id(seen_dirs))
            seen_dirs[meta.directory_id] = d  # type: ignore[index]
            os.makedirs(d, exist_ok=True)
            write(d, meta)
        out[d] = meta
    return out


def _new_directory_id(taken: dict[uuid.UUID, str]) -> uuid.UUID:
    while True:
        u = random_uuid()
        if u not in taken:
            return u


def format_dirs(
    log_dirs: Sequence[str], cluster_id: str, node_id: int, ignore_formatted: bool = False
) -> list[str]:
    """`gregor storage format`: write meta.properties in each dir; the dirs written. A dir
    already formatted is an error, or skipped with `ignore_formatted`."""
    uuid_from_str(cluster_id)  # ValueError names a bad one
    todo = []
    for d in log_dirs:
        meta = read(d) if os.path.isdir(d) else None
        if meta is None:
            todo.append(d)
        elif not ignore_formatted:
            raise MetaPropertiesError(
                f"{path_of(d)} exists: {d} is already formatted (cluster.id={meta.cluster_id}, "
                f"node.id={meta.node_id}). --ignore-formatted skips such dirs."
            )
    taken: dict[uuid.UUID, str] = {}
    for d in todo:
        os.makedirs(d, exist_ok=True)
        directory_id = _new_directory_id(taken)
        taken[directory_id] = d
        write(d, MetaProperties(cluster_id, node_id, directory_id))
    return todo
