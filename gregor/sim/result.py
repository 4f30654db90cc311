"""What one simulated run ends with, whatever its scenario: ok or the invariant it broke, how
far it got, the faults it injected, the digest of its trace (equal digests: the same run, event
for event) and, on a violation, the events just before it."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class RunResult:
    seed: int
    scenario: str
    ok: bool
    events: int
    time_ms: int
    faults: dict[str, int]
    trace_digest: str
    invariant: str | None = None
    detail: str | None = None
    last_events: list[str] = field(default_factory=list)

    def counts(self) -> str:
        """What the scenario counts (committed entries, acknowledged records, ...)."""
        return ""

    def summary(self) -> str:
        faults = ", ".join(f"{k}={v}" for k, v in sorted(self.faults.items())) or "none"
        head = (
            f"seed {self.seed} [{self.scenario}]: {'ok' if self.ok else 'VIOLATION'}; "
            f"{self.events} events, {self.time_ms} ms simulated, {self.counts()}; "
            f"faults: {faults}; trace {self.trace_digest[:16]}"
        )
        if self.ok:
            return head
        lines = [head, f"  invariant: {self.invariant}", f"  detail:    {self.detail}"]
        lines += ["  last events:"] + [f"    {e}" for e in self.last_events]
        return "\n".join(lines)
