"""gregor: Apache Kafka, rebuilt in Python."""

__version__ = "0.1.0"


def __getattr__(name: str) -> type:
    if name == "Broker":
        from gregor.testing.broker import Broker

        return Broker
    raise AttributeError(name)
