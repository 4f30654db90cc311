"""The quorum settings the Raft core honours, under Kafka's `controller.quorum.*` names.

`RaftConfig.from_configs({"controller.quorum.election.timeout.ms": "500", ...})` builds one from
config strings; anything not named takes Kafka's default. Timeouts:

  * election timeout: a voter with no leader starts a pre-vote after a random time in
    [timeout, 2 * timeout) (the jitter comes from the node's injected randomness);
  * fetch timeout: a follower that has not fetched successfully for this long starts a pre-vote;
    a leader that has not been fetched from by a majority for 1.5 times it resigns (check-quorum,
    Kafka's CHECK_QUORUM_TIMEOUT_FACTOR);
  * election backoff max: the cap of the random backoff after a lost election, and the spread
    of the staggered elections after EndQuorumEpoch.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

_NAMES: dict[str, str] = {
    "controller.quorum.election.timeout.ms": "election_timeout_ms",
    "controller.quorum.fetch.timeout.ms": "fetch_timeout_ms",
    "controller.quorum.election.backoff.max.ms": "election_backoff_max_ms",
    "controller.quorum.request.timeout.ms": "request_timeout_ms",
    "controller.quorum.retry.backoff.ms": "retry_backoff_ms",
    "controller.quorum.append.linger.ms": "append_linger_ms",
}


@dataclass(frozen=True, slots=True)
class RaftConfig:
    election_timeout_ms: int = 1000
    fetch_timeout_ms: int = 2000
    election_backoff_max_ms: int = 1000
    request_timeout_ms: int = 2000
    retry_backoff_ms: int = 20
    append_linger_ms: int = 25
    fetch_max_wait_ms: int = 500  # how long the leader parks a fetch that finds nothing new
    # How long a parked fetch may hold news of the high watermark alone, waiting for records
    # to carry it (an append answers it at once): 0 answers it as the high watermark moves.
    high_watermark_linger_ms: int = 5
    fetch_max_bytes: int = 8 * 1024 * 1024
    snapshot_chunk_bytes: int = 1024 * 1024  # FetchSnapshot max bytes per response
    check_quorum_factor: float = 1.5

    @classmethod
    def from_configs(cls, configs: dict[str, str], base: RaftConfig | None = None) -> RaftConfig:
        base = base or cls()
        known = {f.name for f in fields(cls)}
        changes = {
            _NAMES[k]: int(v) for k, v in configs.items() if k in _NAMES and _NAMES[k] in known
        }
        return replace(base, **changes)

    @property
    def check_quorum_timeout_ms(self) -> int:
        return int(self.fetch_timeout_ms * self.check_quorum_factor)

    @property
    def begin_quorum_epoch_interval_ms(self) -> int:
        """How often a leader repeats BeginQuorumEpoch to every voter (Kafka: fetch timeout / 2)."""
        return max(1, self.fetch_timeout_ms // 2)
