"""The web console: server-rendered pages over any Kafka-protocol cluster, as a client of it.

Its own process (`gregor console -b HOST:PORT`) or mounted in a node (`console.listener`). It
reads through confluent-kafka's clients (and our own codec for the two APIs they lack:
DescribeQuorum and DescribeLogDirs), never through a broker's insides, and writes only when
`read_only` is off. `app.create_app(settings)` is the ASGI app; `server` runs it with uvicorn.
"""
