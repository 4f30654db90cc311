"""The persisted quorum state: the epoch, whom this node voted for in it, and its leader if known.

It is written before it is acted on (a vote is on disk before the grant is sent; a leader's own
election is on disk before it appends or sends BeginQuorumEpoch), so a restarted node never votes
twice in one epoch and never goes back to an older epoch.

`FileQuorumStateStore` keeps it where Kafka does, `quorum-state` in the metadata log's directory,
as JSON in Kafka's field names (`leaderId`, `leaderEpoch`, `votedId`, `appliedOffset`,
`currentVoters`, `data_version`), written to a temporary file, fsynced and renamed.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Protocol

from gregor.storage.checkpoints import fsync_dir

FILE_NAME = "quorum-state"


@dataclass(frozen=True, slots=True)
class ElectionState:
    epoch: int
    leader_id: int | None = None
    voted_for: int | None = None


class QuorumStateStore(Protocol):
    def read(self) -> ElectionState | None:
        """The last state written, None if there is none."""
        ...

    def write(self, state: ElectionState) -> None:
        """Durably replace the stored state (returns only once it would survive a crash)."""
        ...


class MemoryQuorumStateStore:
    """A store in memory; `writes` keeps every state written, in order (tests look at it)."""

    def __init__(self, state: ElectionState | None = None) -> None:
        self.state = state
        self.writes: list[ElectionState] = []

    def read(self) -> ElectionState | None:
        return self.state

    def write(self, state: ElectionState) -> None:
        self.state = state
        self.writes.append(state)


class FileQuorumStateStore:
    def __init__(self, directory: str, voters: list[int] | None = None) -> None:
        self.path = os.path.join(directory, FILE_NAME)
        self.voters = sorted(voters or [])

    def read(self) -> ElectionState | None:
        try:
            with open(self.path, encoding="utf-8") as f:
                data = json.load(f)
        except FileNotFoundError:
            return None
        leader = int(data.get("leaderId", -1))
        voted = int(data.get("votedId", -1))
        return ElectionState(
            int(data.get("leaderEpoch", 0)),
            leader if leader >= 0 else None,
            voted if voted >= 0 else None,
        )

    def write(self, state: ElectionState) -> None:
        body = {
            "clusterId": "",
            "leaderId": -1 if state.leader_id is None else state.leader_id,
            "leaderEpoch": state.epoch,
            "votedId": -1 if state.voted_for is None else state.voted_for,
            "appliedOffset": 0,
            "currentVoters": [{"voterId": v} for v in self.voters],
            "data_version": 0,
        }
        tmp = self.path + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(body, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
        fsync_dir(os.path.dirname(self.path) or ".")
