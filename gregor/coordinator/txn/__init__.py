"""The transaction coordinator: transactional producers' ids, epochs and transactions, sans-I/O.

`state` (the states and the one transition table), `records` (the `__transaction_state`
formats), `shard` (the operations, replay, timers and marker bookkeeping for one partition's
transactional ids), `results` (what it is asked and answers), `codes` (its error codes), and
`runtime` (the coordinator's API over the generic runtime of `coordinator/common`, and its
markers).
"""
