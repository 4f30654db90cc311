"""Produce v3-12: append record batches to the partitions this broker leads.

v3: record batch v2 only, transactional_id. v5: log_start_offset. v8: record_errors and
error_message (KIP-467: a batch refused for some of its records names each, by its index in
the batch; `validate.RecordValidationError`). v9: flexible. v10: current_leader /
node_endpoints on NOT_LEADER_OR_FOLLOWER (not filled: the client refreshes its metadata).
acks: 0 (no response; an error closes the connection so the producer notices, as Kafka does),
1 (answered once appended here), -1 (all: refused with NOT_ENOUGH_REPLICAS before appending when the ISR is
smaller than min.insync.replicas; after appending, answered once the high watermark passes
the batch, i.e. every ISR member has it (delayed_produce.py, parked in the purgatory of
replication/purgatory.py): woken by the partition's high-watermark moves, it waits up to its
timeout_ms, then REQUEST_TIMED_OUT; losing leadership meanwhile answers NOT_LEADER_OR_FOLLOWER,
the ISR shrinking below the minimum NOT_ENOUGH_REPLICAS_AFTER_APPEND). With one broker the ISR is that broker and acks=-1
completes at once.

Transactions (KIP-890 part 1): the first transactional batch of a producer in a partition, one
with no open transaction there yet, is checked with the transaction coordinator: its partition
must have been added to the producer's ongoing transaction (AddPartitionsToTxn), or the batch is
refused (INVALID_TXN_STATE; TRANSACTION_ABORTABLE for v11+), so a zombie's late batch cannot
open a transaction nobody will end. Transactional batches need a transactional id. The check
is `services.txn_verifier`'s: answered at once when the coordinator is this broker; when it is
another, the partition's answer waits for it (the response is then a Pending, completed by a
continuation, `_Verification`; the request's other partitions are appended meanwhile) and an
acks=0 batch needing such a check is refused.

No client appends to `__consumer_offsets` or `__transaction_state` (INVALID_TOPIC_EXCEPTION,
"Cannot append to internal topic", with or without an authorizer, after the ACL check), as
Kafka refuses it: only the coordinators write there. (Kafka lets its old admin tools' client id
`__admin_client` through; gregor lets no client.)
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from gregor.handlers.context import RequestContext
from gregor.handlers.delayed_produce import AwaitingWrite, delay, settle
from gregor.handlers.registry import NO_RESPONSE, handles
from gregor.metadata.store import INTERNAL_TOPICS
from gregor.metrics.stats import TopicCounters
from gregor.protocol import api_keys, errors
from gregor.protocol.errors import KafkaError
from gregor.protocol.messages import ProduceResponse
from gregor.protocol.records import batch as rb
from gregor.protocol.records.validate import RecordValidationError
from gregor.replication.partition import Partition
from gregor.replication.pending import Pending
from gregor.security.acls import TOPIC, TRANSACTIONAL_ID, WRITE

log = logging.getLogger("gregor.produce")

TopicResp = ProduceResponse.TopicProduceResponse
PartResp = ProduceResponse.PartitionProduceResponse
RecordError = ProduceResponse.BatchIndexAndErrorMessage
# An answer's current_leader when it names none: one shared by the answers (nothing changes it
# in place), not one made per partition by the generated constructor.
_NO_LEADER = ProduceResponse.LeaderIdAndEpoch()
# Likewise the record_errors of an answer that names none (nearly all): one list a request
# less per partition, an object the garbage collector would otherwise count and walk.
_NO_RECORD_ERRORS: list[Any] = []
_ATTRIBUTES_LOW = rb.ATTRIBUTES_OFFSET + 1  # the low byte of a batch's int16 attributes


class AcksZeroError(Exception):
    """An acks=0 produce failed: the connection is closed so the producer finds out."""


def _verify_transactional(
    ctx: RequestContext, transactional_id: str | None, partition: Partition, header: rb.BatchHeader
) -> Pending | None:
    """Raise if the batch may not be appended; None to append it now; a Pending of the
    coordinator's answer (a Produce error code) to append it once that says so."""
    if not transactional_id:
        raise KafkaError(
            errors.INVALID_RECORD, "a transactional batch needs the request's transactional id"
        )
    entry = partition.log.producer_state.last_entry(header.producer_id)
    if (
        entry is not None
        and entry.current_txn_first_offset >= 0
        and entry.producer_epoch == header.producer_epoch
    ):
        return None  # its transaction is already open here
    answer = ctx.services.txn_verifier.verify(
        transactional_id,
        header.producer_id,
        header.producer_epoch,
        partition.topic,
        partition.index,
        abortable_supported=ctx.version >= 11,
    )
    if not isinstance(answer, int):
        return answer
    if answer:
        raise _unverified(answer, partition.topic, partition.index, header, transactional_id)
    return None


def _unverified(
    code: int, topic: str, index: int, header: rb.BatchHeader, transactional_id: str | None
) -> KafkaError:
    return KafkaError(
        code,
        f"{topic}-{index} is not in an ongoing transaction of producer "
        f"{header.producer_id} (epoch {header.producer_epoch}, transactional id {transactional_id})",
    )


@dataclass
class _Waiting:
    """A partition whose transactional batch waits for a coordinator on another broker."""

    parts: list[Any]
    slot: int
    topic: str
    data: Any
    header: rb.BatchHeader
    answer: Pending  # of the coordinator's answer, a Produce error code


def _produce_partition(
    ctx: RequestContext,
    request: Any,
    topic: str,
    counts: TopicCounters,
    pd: Any,
    now: int,
    failed: list[str],
    waiting: list[_Waiting],
    parts: list[Any],
    awaiting: list[AwaitingWrite],
    *,
    verified: bool = False,
) -> Any:
    """Append one partition's batch (counted in `counts`, its topic's); its response, or None
    when it waits for a coordinator (added to `waiting`). An acks=all write not yet replicated
    is added to `awaiting`."""
    acks = request.acks
    code, message, base, append_time, start = errors.NONE, None, -1, -1, -1
    partition = info = None
    record_errors: list[Any] = _NO_RECORD_ERRORS
    try:
        if acks not in (-1, 0, 1):
            raise KafkaError(errors.INVALID_REQUIRED_ACKS, f"acks={acks} is not one of -1, 0, 1")
        if pd.records is None or len(pd.records) == 0:
            raise KafkaError(errors.INVALID_RECORD, "the request holds no record batch")
        partition = ctx.services.replicas.leader(topic, pd.index)
        records = pd.records
        # The transactional flag, in the low byte of the attributes: the header is read whole
        # (and checked, by the log) only for the rare transactional batch.
        if (
            not verified
            and len(records) >= rb.HEADER_SIZE
            and records[_ATTRIBUTES_LOW] & rb.TRANSACTIONAL_FLAG
        ):
            header = rb.read_header(records)
            answer = _verify_transactional(ctx, request.transactional_id, partition, header)
            if answer is not None:
                if acks == 0:
                    raise KafkaError(
                        errors.INVALID_REQUIRED_ACKS,
                        "a transactional batch whose coordinator is another broker needs acks=1 or all",
                    )
                waiting.append(_Waiting(parts, len(parts), topic, pd, header, answer))
                return None
        info = partition.append_as_leader(records, acks, now)
        base, append_time, start = info.first_offset, info.log_append_time, info.log_start_offset
        counts.total_produce += 1
        counts.messages_in += info.last_offset - base + 1
        counts.bytes_in += len(records)
    except KafkaError as exc:
        code, message = exc.code, exc.message
        counts.total_produce += 1
        counts.failed_produce += 1
        if isinstance(exc, RecordValidationError):
            record_errors = [
                RecordError(batch_index=i, batch_index_error_message=text)
                for i, text in exc.record_errors
            ]
        if code not in (
            errors.UNKNOWN_TOPIC_OR_PARTITION,
            errors.NOT_LEADER_OR_FOLLOWER,
            errors.KAFKA_STORAGE_ERROR,
        ):
            log.warning("produce to %s-%d from %s refused: %s", topic, pd.index, ctx.peer, exc)
        failed.append(f"{topic}-{pd.index}: {exc}")
    part = PartResp._make(
        index=pd.index,
        error_code=code,
        base_offset=base,
        log_append_time_ms=append_time,
        log_start_offset=start,
        record_errors=record_errors,
        error_message=message,
        current_leader=_NO_LEADER,
    )
    if acks == -1 and info is not None and partition is not None:
        write = AwaitingWrite(part, partition, info.last_offset + 1, partition.leader_epoch)
        if not settle(write):
            awaiting.append(write)
    return part


def _refused_parts(topic: Any, code: int, message: str, failed: list[str]) -> list[Any]:
    """Every partition of `topic` refused with `code` (an authorization failure, or an
    internal topic a client may not write to)."""
    failed.append(f"{topic.name}: {message}")
    return [
        PartResp(
            index=pd.index,
            error_code=code,
            base_offset=-1,
            log_append_time_ms=-1,
            log_start_offset=-1,
            error_message=message,
        )
        for pd in topic.partition_data
    ]


def _authorization_refusal(ctx: RequestContext, request: Any, topic: str) -> int:
    """Kafka's checks (with an authorizer only): WRITE on the transactional id of a
    transactional request (TRANSACTIONAL_ID_AUTHORIZATION_FAILED for all of it), WRITE on
    each topic (TOPIC_AUTHORIZATION_FAILED for its partitions); 0 when allowed."""
    txn_id = request.transactional_id
    if txn_id and not ctx.authorize(WRITE, TRANSACTIONAL_ID, txn_id):
        return errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    if not ctx.authorize(WRITE, TOPIC, topic):
        return errors.TOPIC_AUTHORIZATION_FAILED
    return 0


@handles(api_keys.PRODUCE)
def handle(ctx: RequestContext, request: Any) -> Any:
    acks = request.acks
    now = ctx.services.now_ms()
    responses = []
    failed: list[str] = []
    waiting: list[_Waiting] = []
    awaiting: list[AwaitingWrite] = []
    authorizing = ctx.services.authorizer is not None
    for topic in request.topic_data:
        if authorizing:
            refusal = _authorization_refusal(ctx, request, topic.name)
            if refusal:
                message = f"{errors.name_of(refusal)}: producing to {topic.name} is not authorized"
                refused = _refused_parts(topic, refusal, message, failed)
                responses.append(TopicResp(name=topic.name, partition_responses=refused))
                continue
        if topic.name in INTERNAL_TOPICS:
            message = f"Cannot append to internal topic {topic.name}"
            refused = _refused_parts(topic, errors.INVALID_TOPIC_EXCEPTION, message, failed)
            responses.append(TopicResp(name=topic.name, partition_responses=refused))
            continue
        parts: list[Any] = []
        name, counts = topic.name, ctx.services.topic_stats.topic(topic.name)
        for pd in topic.partition_data:
            parts.append(
                _produce_partition(
                    ctx, request, name, counts, pd, now, failed, waiting, parts, awaiting
                )
            )
        responses.append(TopicResp._make(name=topic.name, partition_responses=parts))
    if waiting:
        return _Verification(ctx, request, responses, waiting, awaiting).resume()
    if acks == 0:
        if failed:
            raise AcksZeroError("; ".join(failed))
        return NO_RESPONSE
    if awaiting:  # (each found unsettled right after its append)
        response = ProduceResponse._make(responses=responses)
        return delay(ctx, response, awaiting, request.timeout_ms, just_checked=True, now_ms=now)
    return ProduceResponse._make(responses=responses)


class _Verification:
    """The continuation of a request whose transactional batches wait for their coordinator on
    another broker: each appended once its answer comes, in the order they came; then, for
    acks=all, the answer once every write is replicated (`answer`, a Pending)."""

    def __init__(
        self,
        ctx: RequestContext,
        request: Any,
        responses: list[Any],
        waiting: list[_Waiting],
        awaiting: list[AwaitingWrite],
    ) -> None:
        self.ctx, self.request, self.responses = ctx, request, responses
        self.waiting, self.awaiting = waiting, awaiting
        self.next = 0
        self.answer = Pending("produce")

    def resume(self, _code: int | None = None) -> Pending:
        while self.next < len(self.waiting):
            w = self.waiting[self.next]
            if not w.answer.done:
                w.answer.add_done_callback(self.resume)  # called once, when it is
                return self.answer
            self.next += 1
            self._append(w, w.answer.value)
        response = ProduceResponse(responses=self.responses)
        if self.awaiting:
            delayed = delay(self.ctx, response, self.awaiting, self.request.timeout_ms)
            if isinstance(delayed, Pending):
                delayed.add_done_callback(self.answer.complete)
                return self.answer
        self.answer.complete(response)
        return self.answer

    def _append(self, w: _Waiting, code: int) -> None:
        ctx, request = self.ctx, self.request
        if code:
            exc = _unverified(code, w.topic, w.data.index, w.header, request.transactional_id)
            log.warning(
                "produce to %s-%d from %s refused: %s", w.topic, w.data.index, ctx.peer, exc
            )
            w.parts[w.slot] = PartResp(
                index=w.data.index,
                error_code=code,
                base_offset=-1,
                log_append_time_ms=-1,
                log_start_offset=-1,
                error_message=exc.message,
            )
            return
        w.parts[w.slot] = _produce_partition(
            ctx,
            request,
            w.topic,
            ctx.services.topic_stats.topic(w.topic),
            w.data,
            ctx.services.now_ms(),
            [],
            [],
            w.parts,
            self.awaiting,
            verified=True,
        )
