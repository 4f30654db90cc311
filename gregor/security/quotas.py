"""Client quotas as Kafka applies them: which quota binds a request, its rate, its throttle.

Pure: no I/O, every time is a `now_ms` argument. The runtime (broker/quota_gate.py) records the
bytes of each Produce request and Fetch response here and mutes the connection for the throttle
time returned.

Entities. A quota is set on a user, a client id, or both, each either named or the default
(`<default>`; a null name on the wire). An entity is the sorted tuple of its (type, name) parts,
name None for the default: `(("client-id", "app"), ("user", None))` is
/config/users/<default>/clients/app.

Precedence (Kafka's ClientQuotaManager): for a request of user U and client id C, the first of
these with a value for the quota's key binds:

    1. /config/users/U/clients/C             5. /config/users/<default>/clients/<default>
    2. /config/users/U/clients/<default>     6. /config/users/<default>
    3. /config/users/U                       7. /config/clients/C
    4. /config/users/<default>/clients/C     8. /config/clients/<default>

What is measured together (the sensor, Kafka's metric tags): (U, C) for levels 1, 2, 4 and 5;
every client of U for 3 and 6; every user of C for 7 and 8. So a user quota is shared by all
of that user's clients, a default quota is not shared between the users (or client ids) it
covers.

Rate (Kafka's Rate over a SampledStat): `quota.window.num` samples of `quota.window.size.seconds`
each; a sample is reset once no event fell in it for num x size; the rate is the sum of the
samples over the elapsed window, which counts as at least (num - 1) whole windows.

Throttle (Kafka's QuotaUtils.throttleTime): when the rate O after recording exceeds the bound T,
the delay X that brings it back, had nothing more been recorded: O * W / (W + X) = T, so
X = (O - T) / T * W, with W the window the rate was measured over.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

USER = "user"
CLIENT_ID = "client-id"
IP = "ip"
DEFAULT_NAME = "<default>"  # how tools print a default entity's name

PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
REQUEST_PERCENTAGE = "request_percentage"
CONTROLLER_MUTATION_RATE = "controller_mutation_rate"
# The client quota keys (Kafka's QuotaConfig): integral byte rates, the two others doubles.
CLIENT_KEYS = {
    PRODUCER_BYTE_RATE: True,
    CONSUMER_BYTE_RATE: True,
    REQUEST_PERCENTAGE: False,
    CONTROLLER_MUTATION_RATE: False,
}

DEFAULT_WINDOW_NUM = 11  # quota.window.num
DEFAULT_WINDOW_SIZE_SECONDS = 1  # quota.window.size.seconds

Entity = tuple[tuple[str, str | None], ...]  # sorted (entity type, name or None for default)
SensorKey = tuple[str, str]  # (user or "", client id or ""): Kafka's quota metric tags


def precedence(user: str, client_id: str) -> list[tuple[Entity, SensorKey]]:
    """The entities that may bind a request of (user, client_id), most specific first, each
    with the sensor it is measured on."""
    both = (user, client_id)
    return [
        (((CLIENT_ID, client_id), (USER, user)), both),
        (((CLIENT_ID, None), (USER, user)), both),
        (((USER, user),), (user, "")),
        (((CLIENT_ID, client_id), (USER, None)), both),
        (((CLIENT_ID, None), (USER, None)), both),
        (((USER, None),), (user, "")),
        (((CLIENT_ID, client_id),), ("", client_id)),
        (((CLIENT_ID, None),), ("", client_id)),
    ]


def resolve(
    bounds: Mapping[Entity, float], user: str, client_id: str
) -> tuple[SensorKey, float] | None:
    """The quota that binds (user, client_id) among `bounds` (one key's values by entity), and
    the sensor it is measured on; None when no entity has a value."""
    for ent, sensor in precedence(user, client_id):
        bound = bounds.get(ent)
        if bound is not None:
            return sensor, bound
    return None


@dataclass
class _Sample:
    start_ms: int
    last_ms: int
    value: float = 0.0
    count: int = 0


@dataclass
class Rate:
    """A rate per second over `num` samples of `window_ms` each (Kafka's Rate + WindowedSum)."""

    num: int = DEFAULT_WINDOW_NUM
    window_ms: int = DEFAULT_WINDOW_SIZE_SECONDS * 1000
    samples: list[_Sample] = field(default_factory=list)
    current: int = 0

    def record(self, value: float, now_ms: int) -> None:
        if not self.samples:
            self.samples.append(_Sample(now_ms, now_ms))
        sample = self.samples[self.current]
        if now_ms - sample.start_ms >= self.window_ms:
            sample = self._advance(now_ms)
        sample.value += value
        sample.count += 1
        sample.last_ms = now_ms

    def _advance(self, now_ms: int) -> _Sample:
        # One sample more than `num`: the oldest may overlap the window's start.
        self.current = (self.current + 1) % (self.num + 1)
        if self.current >= len(self.samples):
            self.samples.append(_Sample(now_ms, now_ms))
        else:
            self.samples[self.current] = _Sample(now_ms, now_ms)
        return self.samples[self.current]

    def _purge(self, now_ms: int) -> None:
        expire = self.num * self.window_ms
        for i, sample in enumerate(self.samples):
            if now_ms - sample.last_ms >= expire:
                self.samples[i] = _Sample(now_ms, now_ms)

    def window_size_ms(self, now_ms: int) -> int:
        """The window the rate is measured over: elapsed since the oldest sample, at least
        (num - 1) whole windows, at least 1 ms."""
        self._purge(now_ms)
        oldest = min((s.start_ms for s in self.samples), default=now_ms)
        elapsed = now_ms - oldest
        full = elapsed // self.window_ms
        if full < self.num - 1:
            elapsed += (self.num - 1 - full) * self.window_ms
        return max(elapsed, 1)

    def measure(self, now_ms: int) -> float:
        window = self.window_size_ms(now_ms)
        return sum(s.value for s in self.samples) / (window / 1000.0)


def throttle_time_ms(observed: float, bound: float, window_ms: int) -> int:
    """Kafka's throttle time: how long until `observed` falls back to `bound` over the window."""
    if observed <= bound:
        return 0
    return math.floor((observed - bound) / bound * window_ms + 0.5)  # Java's Math.round


class QuotaState:
    """One quota key's bounds (by entity) and its sensors; `record` returns the throttle."""

    def __init__(
        self,
        bounds: Mapping[Entity, float],
        num: int = DEFAULT_WINDOW_NUM,
        window_ms: int = DEFAULT_WINDOW_SIZE_SECONDS * 1000,
    ) -> None:
        self.bounds = dict(bounds)
        self.num = num
        self.window_ms = window_ms
        self.sensors: dict[SensorKey, Rate] = {}

    def record(self, user: str, client_id: str, value: float, now_ms: int) -> int:
        """Record `value` for (user, client_id) at now_ms: the throttle time in ms (0 when
        within the quota or when no quota binds)."""
        found = resolve(self.bounds, user, client_id)
        if found is None:
            return 0
        sensor_key, bound = found
        rate = self.sensors.get(sensor_key)
        if rate is None:
            rate = self.sensors[sensor_key] = Rate(self.num, self.window_ms)
        rate.record(value, now_ms)
        observed = rate.measure(now_ms)
        if observed <= bound:
            return 0
        return throttle_time_ms(observed, bound, rate.window_size_ms(now_ms))

    def over(self, user: str, client_id: str, now_ms: int) -> int:
        """Strict check (controller mutations, KIP-599): the throttle time if the rate of
        (user, client_id) is already above its quota, else 0; records nothing."""
        found = resolve(self.bounds, user, client_id)
        if found is None:
            return 0
        sensor_key, bound = found
        rate = self.sensors.get(sensor_key)
        if rate is None:
            return 0
        return throttle_time_ms(rate.measure(now_ms), bound, rate.window_size_ms(now_ms))

    def add(self, user: str, client_id: str, value: float, now_ms: int) -> None:
        """Record `value` without checking the quota (a mutation admitted by `over`)."""
        found = resolve(self.bounds, user, client_id)
        if found is None:
            return
        rate = self.sensors.get(found[0])
        if rate is None:
            rate = self.sensors[found[0]] = Rate(self.num, self.window_ms)
        rate.record(value, now_ms)

    def unrecord(self, user: str, client_id: str, value: float, now_ms: int) -> None:
        """Take back `value` recorded at about now_ms (Kafka's unrecordQuotaSensor: a
        throttled Fetch sends no data, so its bytes do not count)."""
        self.add(user, client_id, -value, now_ms)

    def max_in_window(self, user: str, client_id: str) -> int | None:
        """The most that fits in the quota window with nothing recorded before (Kafka's
        getMaxValueInQuotaWindow: the bound times num - 1 windows); None when no quota binds.
        A consumer's Fetch asks for at most this, so that one response is not sure to be
        throttled."""
        found = resolve(self.bounds, user, client_id)
        if found is None:
            return None
        return int(found[1] * (self.num - 1) * self.window_ms / 1000)

    def expire(self, now_ms: int) -> None:
        """Forget sensors with no event for the whole window (their rate is 0 anyway)."""
        horizon = self.num * self.window_ms
        idle = [
            k
            for k, r in self.sensors.items()
            if all(now_ms - s.last_ms >= horizon for s in r.samples)
        ]
        for k in idle:
            del self.sensors[k]


def by_key(quotas: Mapping[Entity, Mapping[str, float]]) -> dict[str, dict[Entity, float]]:
    """The image's quotas (entity -> key -> value) turned around: key -> entity -> value."""
    out: dict[str, dict[Entity, float]] = {}
    for ent, values in quotas.items():
        for key, value in values.items():
            out.setdefault(key, {})[ent] = value
    return out


def entity_text(ent: Iterable[tuple[str, str | None]]) -> str:
    """`user=alice, client-id=<default>`: how tools and logs name an entity."""
    return ", ".join(f"{t}={DEFAULT_NAME if n is None else n}" for t, n in ent)
