"""The group coordinator: the classic consumer group protocol and committed offsets, sans-I/O.

`records` (the `__consumer_offsets` formats), `classic` (a group and its state machine),
`shard` (the operations, replay and timers for one partition's groups), `results` (what it is
asked and answers), `pending` (answers that wait), `timers` (keyed deadlines).
"""
