"""`gregor mirror`: MirrorMaker 2's model of replication between Kafka-protocol clusters.

A client of two (or more) clusters, never imported by the broker. So far the sans-I/O
foundations: the `mm2.properties` configuration (`config`), replication policies (`policy`),
topic and group filters (`filters`), MirrorMaker's record formats (`formats`), the source
connector's decisions (`source`: record copies, topics to create and grow, configs, ACLs), and
offset syncs, checkpoints and offset translation (`offsets`). The engine that moves records arrives next.
"""
