"""A real broker for your tests: `gregor.Broker()` and the `kafka_bootstrap` pytest fixture."""

from gregor.testing.broker import Broker

__all__ = ["Broker"]
