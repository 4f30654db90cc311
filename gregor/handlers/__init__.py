"""One module per API family; importing this package registers them all in `registry.HANDLERS`."""

from gregor.handlers import (  # noqa: F401
    api_versions,
    cluster,
    configs,
    describe_producers,
    elect_leaders,
    fetch,
    group_admin,
    groups,
    init_producer_id,
    list_offsets,
    metadata,
    offsets,
    produce,
    quorum,
    records_admin,
    sasl,
    topics,
    txn,
    txn_markers,
    txn_offsets,
)
