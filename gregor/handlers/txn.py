"""Transactions: AddPartitionsToTxn v0-5, AddOffsetsToTxn v0-4, EndTxn v0-5, DescribeTransactions
v0, ListTransactions v0-1. The rules live in `gregor.coordinator.txn`; this module translates.
(InitProducerId is in init_producer_id.py, FindCoordinator in groups.py.)

AddPartitionsToTxn: v0-3 one transaction from a client (v3 flexible); every partition must
exist (else UNKNOWN_TOPIC_OR_PARTITION) and not be an internal topic (TOPIC_AUTHORIZATION_FAILED,
as Kafka's authorizer answers), or nothing is added and the rest get OPERATION_NOT_ATTEMPTED;
otherwise all get the coordinator's one answer. v4+ batched, from brokers: several transactions,
and verify_only (KIP-890 part 1), answered per partition. v5 TRANSACTION_ABORTABLE.
AddOffsetsToTxn adds the group's `__consumer_offsets` partition. EndTxn: v5 (KIP-890 part 2)
bumps the epoch at each transaction and answers the producer id and epoch. Versions before 2
(AddPartitionsToTxn, AddOffsetsToTxn, EndTxn) and InitProducerId before 4 know no
PRODUCER_FENCED: they get INVALID_PRODUCER_EPOCH, as Kafka answers them.
DescribeTransactions: per id, its state, producer, timeout, start and partitions (while
preparing, those still owed a marker). ListTransactions: filters by state, producer id and, v1,
by running longer than duration_filter ms (KIP-994).
"""

from __future__ import annotations

from typing import Any

from gregor.coordinator.txn import codes
from gregor.handlers.context import RequestContext
from gregor.handlers.groups import respond
from gregor.handlers.registry import handles
from gregor.metadata.store import INTERNAL_TOPICS
from gregor.protocol import api_keys, errors
from gregor.protocol.messages import (
    AddOffsetsToTxnResponse,
    AddPartitionsToTxnResponse,
    DescribeTransactionsResponse,
    EndTxnResponse,
    ListTransactionsResponse,
)
from gregor.replication.pending import Pending, all_of
from gregor.security.acls import (
    CLUSTER_ACTION,
    DESCRIBE,
    GROUP,
    READ,
    TOPIC,
    TRANSACTIONAL_ID,
    WRITE,
)


def fenced_for(version: int, first_fenced_version: int, code: int) -> int:
    """PRODUCER_FENCED (KIP-588) for clients that know it, INVALID_PRODUCER_EPOCH before."""
    if code == codes.PRODUCER_FENCED and version < first_fenced_version:
        return codes.INVALID_PRODUCER_EPOCH
    return code


# -- AddPartitionsToTxn ----------------------------------------------------------------------------


@handles(api_keys.ADD_PARTITIONS_TO_TXN)
def add_partitions_to_txn(ctx: RequestContext, request: Any) -> Any:
    v = ctx.version
    R = AddPartitionsToTxnResponse
    if v < 4:
        results = _add(
            ctx,
            request.v3_and_below_transactional_id,
            request.v3_and_below_producer_id,
            request.v3_and_below_producer_epoch,
            request.v3_and_below_topics,
            verify_only=False,
            from_client=True,
        )
        return respond(
            results, lambda res: R(throttle_time_ms=0, results_by_topic_v3_and_below=res)
        )
    if not ctx.authorize_cluster(CLUSTER_ACTION):  # v4+: brokers verifying for a Produce
        return R(throttle_time_ms=0, error_code=errors.CLUSTER_AUTHORIZATION_FAILED)
    by_txn = all_of({
        str(i): _add(
            ctx, t.transactional_id, t.producer_id, t.producer_epoch, t.topics,
            verify_only=t.verify_only, from_client=False,
        )
        for i, t in enumerate(request.transactions)
    })  # fmt: skip

    def response(results: dict[str, list[Any]]) -> Any:
        out = [
            R.AddPartitionsToTxnResult(
                transactional_id=t.transactional_id, topic_results=results[str(i)]
            )
            for i, t in enumerate(request.transactions)
        ]
        return R(throttle_time_ms=0, error_code=codes.NONE, results_by_transaction=out)

    return respond(by_txn, response)


def _add(
    ctx: RequestContext,
    tid: str,
    producer_id: int,
    producer_epoch: int,
    topics: list[Any],
    *,
    verify_only: bool,
    from_client: bool,
) -> list[Any] | Pending:
    """The topic results; a Pending of them while the coordinator's write is replicated."""
    b = ctx.services
    wanted: list[tuple[str, int]] = list(
        dict.fromkeys((t.name, p) for t in topics for p in t.partitions)
    )
    refused: dict[tuple[str, int], int] = {}
    if from_client and not ctx.authorize(WRITE, TRANSACTIONAL_ID, tid):
        failed = errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        return _by_topic(wanted, dict.fromkeys(wanted, failed))
    for topic, index in wanted:
        info = b.store.topics.get(topic)
        if from_client and (topic in INTERNAL_TOPICS or not ctx.authorize(WRITE, TOPIC, topic)):
            refused[(topic, index)] = codes.TOPIC_AUTHORIZATION_FAILED
        elif info is None or not 0 <= index < info.partitions:
            refused[(topic, index)] = codes.UNKNOWN_TOPIC_OR_PARTITION
    if refused:
        by_tp = {tp: refused.get(tp, codes.OPERATION_NOT_ATTEMPTED) for tp in wanted}
    elif verify_only:
        by_tp = b.transactions.verify_partitions(tid, producer_id, producer_epoch, wanted)
    else:
        version = ctx.version
        result = b.transactions.add_partitions(tid, producer_id, producer_epoch, wanted, b.now_ms())

        def added(code: int) -> list[Any]:
            return _by_topic(wanted, dict.fromkeys(wanted, fenced_for(version, 2, code)))

        if isinstance(result, Pending):
            answer = Pending(f"add partitions {tid}")
            result.add_done_callback(lambda code: answer.complete(added(code)))
            return answer
        return added(result)
    return _by_topic(wanted, by_tp)


def _by_topic(wanted: list[tuple[str, int]], by_tp: dict[tuple[str, int], int]) -> list[Any]:
    R = AddPartitionsToTxnResponse
    grouped: dict[str, list[Any]] = {}
    for topic, index in wanted:
        grouped.setdefault(topic, []).append(
            R.AddPartitionsToTxnPartitionResult(
                partition_index=index, partition_error_code=by_tp[(topic, index)]
            )
        )
    return [
        R.AddPartitionsToTxnTopicResult(name=t, results_by_partition=ps)
        for t, ps in grouped.items()
    ]


# -- AddOffsetsToTxn and EndTxn --------------------------------------------------------------------


@handles(api_keys.ADD_OFFSETS_TO_TXN)
def add_offsets_to_txn(ctx: RequestContext, request: Any) -> Any:
    b = ctx.services
    if not ctx.authorize(WRITE, TRANSACTIONAL_ID, request.transactional_id):
        refusal = errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        return AddOffsetsToTxnResponse(throttle_time_ms=0, error_code=refusal)
    if not ctx.authorize(READ, GROUP, request.group_id):
        refusal = errors.GROUP_AUTHORIZATION_FAILED
        return AddOffsetsToTxnResponse(throttle_time_ms=0, error_code=refusal)
    result = b.transactions.add_offsets(
        request.transactional_id,
        request.producer_id,
        request.producer_epoch,
        request.group_id,
        b.now_ms(),
    )
    v = ctx.version
    return respond(
        result,
        lambda code: AddOffsetsToTxnResponse(throttle_time_ms=0, error_code=fenced_for(v, 2, code)),
    )


@handles(api_keys.END_TXN)
def end_txn(ctx: RequestContext, request: Any) -> Any:
    b = ctx.services
    if not ctx.authorize(WRITE, TRANSACTIONAL_ID, request.transactional_id):
        refusal = errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        return EndTxnResponse(throttle_time_ms=0, error_code=refusal)
    result = b.transactions.end_txn(
        request.transactional_id,
        request.producer_id,
        request.producer_epoch,
        request.committed,
        2 if ctx.version >= 5 else 0,
        b.now_ms(),
    )
    v = ctx.version
    return respond(
        result,
        lambda res: EndTxnResponse(
            throttle_time_ms=0,
            error_code=fenced_for(v, 2, res.error),
            producer_id=res.producer_id,
            producer_epoch=res.producer_epoch,
        ),
    )


# -- DescribeTransactions and ListTransactions -----------------------------------------------------


@handles(api_keys.DESCRIBE_TRANSACTIONS)
def describe_transactions(ctx: RequestContext, request: Any) -> Any:
    R = DescribeTransactionsResponse
    out = []
    for tid in request.transactional_ids:
        if not ctx.authorize(DESCRIBE, TRANSACTIONAL_ID, tid):
            refusal = errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
            out.append(R.TransactionState(error_code=refusal, transactional_id=tid, topics=[]))
            continue
        d = ctx.services.transactions.describe(tid)
        out.append(
            R.TransactionState(
                error_code=d.error,
                transactional_id=tid,
                transaction_state=d.state,
                transaction_timeout_ms=d.timeout_ms,
                transaction_start_time_ms=d.start_ms,
                producer_id=d.producer_id,
                producer_epoch=d.producer_epoch,
                topics=[R.TopicData(topic=t, partitions=ps) for t, ps in d.partitions],
            )
        )
    return R(throttle_time_ms=0, transaction_states=out)


@handles(api_keys.LIST_TRANSACTIONS)
def list_transactions(ctx: RequestContext, request: Any) -> Any:
    b = ctx.services
    duration = request.duration_filter if ctx.version >= 1 else -1
    res = b.transactions.list_transactions(
        request.state_filters, request.producer_id_filters, duration, b.now_ms()
    )
    R = ListTransactionsResponse
    return R(
        throttle_time_ms=0,
        error_code=res.error,
        unknown_state_filters=res.unknown_state_filters,
        transaction_states=[
            R.TransactionState(
                transactional_id=t.transactional_id,
                producer_id=t.producer_id,
                transaction_state=t.state,
            )
            for t in res.transactions
            if ctx.authorize(DESCRIBE, TRANSACTIONAL_ID, t.transactional_id)
        ],
    )
