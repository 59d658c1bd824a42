"""Kafka's transaction protocol, request by request (transaction protocol version 1).

A task's transaction is begun on an executor and committed by the driver in another
process, so each step is a plain request naming ``(transactional id, producer id,
epoch)``: ``InitProducerId`` (fences older users of the id and aborts their open
transaction), ``AddPartitionsToTxn``, ``Produce``, ``EndTxn``. Versions are chosen below
those of transaction protocol 2 (KIP-890: EndTxn v5 / Produce v12 bump the epoch on
every commit), so an epoch stays valid from prepare to commit.

Errors are sorted as Flink's sinks sort them (``errors``, through kafka-python's error
classes): retriable codes are retried here for a bounded time; fencing codes raise
``FencedError``; the rest raise ``FatalCommitError`` or ``ConnectorError`` naming the
request and Kafka's error.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

from kafka.errors import TransactionalIdNotFoundError
from kafka.protocol.admin.configs import DescribeConfigsRequest, DescribeConfigsResponse
from kafka.protocol.admin.groups import ListGroupsRequest, ListGroupsResponse
from kafka.protocol.admin.transactions import (
    DescribeTransactionsRequest,
    DescribeTransactionsResponse,
    ListTransactionsRequest,
    ListTransactionsResponse,
)
from kafka.protocol.consumer.group import (
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
)
from kafka.protocol.metadata.find_coordinator import FindCoordinatorRequest, FindCoordinatorResponse
from kafka.protocol.metadata.metadata import MetadataRequest, MetadataResponse
from kafka.protocol.producer.transaction import (
    AddOffsetsToTxnRequest,
    AddOffsetsToTxnResponse,
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    EndTxnRequest,
    EndTxnResponse,
    InitProducerIdRequest,
    InitProducerIdResponse,
    TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
)

from spark_ext.connectors.kafka.client import errors
from spark_ext.connectors.kafka.client.connection import METADATA_VERSION, Conn, metadata
from spark_ext.connectors.kafka.client.errors import error_name
from spark_ext.connectors.kafka.client.security import PLAINTEXT, KafkaSecurity
from spark_ext.errors import ConnectorError, FatalCommitError, FencedError, RetriableCommitError
from spark_ext.retry import Backoff, retry

T = TypeVar("T")



@dataclass(frozen=True)
class Producer:
    """Who may write to a transaction: the id and the epoch the coordinator handed out."""

    transactional_id: str
    producer_id: int
    epoch: int


@dataclass(frozen=True)
class TxnState:
    """One row of DescribeTransactions."""

    transactional_id: str
    state: str  # Empty, Ongoing, PrepareCommit, PrepareAbort, CompleteCommit, CompleteAbort, Dead,
    #            NotFound (the id expired)
    producer_id: int
    epoch: int
    start_ms: int
    timeout_ms: int
    partitions: tuple[tuple[str, int], ...] = ()  # added to the open transaction


class KafkaTxnClient:
    """Talks to the transaction and group coordinators. Driver or executor; not thread-safe."""

    def __init__(self, bootstrap: str, timeout_s: float = 30.0, security: KafkaSecurity = PLAINTEXT,
                 budget_s: float | None = None) -> None:
        """``timeout_s`` bounds one request; ``budget_s`` (default: ``timeout_s``) one call,
        retries included: a broker that froze costs one request timeout, and the retries
        then find the coordinator or leader that took over."""
        self.bootstrap = bootstrap
        self.timeout_s = timeout_s
        self.budget_s = max(budget_s or timeout_s, timeout_s)
        self.security = security
        # One connection per broker, shared by every key it coordinates: a batch's tasks'
        # transactional ids mostly share a few coordinators.
        self._nodes: dict[int, Conn] = {}
        self._coords: dict[tuple[int, str], int] = {}  # (key type, key) -> its coordinator's node
        self._any: Conn | None = None
        self._any_node = -1
        self._failed_nodes: set[int] = set()  # brokers that just failed us: asked last

    # --- connections -------------------------------------------------------------------

    def any_broker(self) -> Conn:
        if self._any is None:
            md = metadata(self.bootstrap, [], self.timeout_s, self.security)
            # A broker that just timed out may still be listed (until the controller fences
            # it): ask the others first.
            b = sorted(md.brokers, key=lambda b: (b.node_id in self._failed_nodes, b.node_id))[0]
            self._any_node = b.node_id
            try:
                self._any = Conn(b.host, b.port, self.timeout_s, self.security)
            except OSError:
                self._failed_nodes.add(b.node_id)  # killed, not yet fenced: ask another next
                raise
        return self._any

    def metadata(self, topics: Sequence[str]) -> Any:
        """The cluster's metadata for ``topics``, asked over this client's open connection."""
        def call() -> Any:
            req = MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=t) for t in topics],
                                  allow_auto_topic_creation=False)
            return self.any_broker().request(req, METADATA_VERSION, MetadataResponse)
        return self._retry("reading Kafka's metadata", call)

    def coordinator(self, key: str, key_type: int) -> Conn:
        """Connection to the coordinator of ``key`` (0 = group, 1 = transactional id)."""
        node = self._coords.get((key_type, key))
        if node is not None and node in self._nodes:
            return self._nodes[node]

        def find() -> Any:
            req = FindCoordinatorRequest(key=key, key_type=key_type)
            r = self.any_broker().request(req, 3, FindCoordinatorResponse)
            _check(r.error_code, f"finding the coordinator of {key!r}")
            return r

        r = self._retry(f"finding the coordinator of {key!r}", find)
        conn = self._node(r.node_id, r.host, r.port)
        self._coords[(key_type, key)] = r.node_id
        return conn

    def coordinators(self, keys: Sequence[str], key_type: int) -> None:
        """Look up the coordinators of the ``keys`` not known yet in one request
        (FindCoordinator v4: Kafka 3.0 on, older than ``list_transactions`` needs), so a
        batch's commit asks once, not once per task. What this does not learn (a key's
        error, a broken connection) is left to ``coordinator``, which asks for one key
        with retries."""
        unknown = [k for k in dict.fromkeys(keys) if self._coords.get((key_type, k)) not in self._nodes]
        if not unknown:
            return
        req = FindCoordinatorRequest(key_type=key_type, coordinator_keys=unknown)
        try:
            r = self.any_broker().request(req, 4, FindCoordinatorResponse)
        except OSError:
            if self._any is not None:
                self._any.close()
                self._any = None
            return
        for c in r.coordinators:
            if c.error_code != errors.OK:
                continue
            try:
                self._node(c.node_id, c.host, c.port)
            except OSError:
                continue
            self._coords[(key_type, c.key)] = c.node_id

    def end_txns(self, ps: Sequence[Producer], commit: bool) -> list[Producer]:
        """``end_txn`` for many producers, pipelined: the requests to one coordinator go
        out together and their answers are read in order, so ending a batch's
        transactions costs about a round trip per coordinator, not one per task. Returns
        the producers this did not end (an error answered, a connection broken): the
        caller ends those with ``end_txn``, one at a time, which retries and raises. Ending
        one twice is safe: the broker answers a repeated end of a transaction it ended
        with the same producer epoch as the first."""
        self.coordinators([p.transactional_id for p in ps], 1)
        left: list[Producer] = []
        by_node: dict[int, list[Producer]] = {}
        for p in ps:
            node = self._coords.get((1, p.transactional_id))
            if node is None or node not in self._nodes:
                left.append(p)
            else:
                by_node.setdefault(node, []).append(p)
        for node, group in by_node.items():
            conn, answered = self._nodes[node], 0
            try:
                for p in group:
                    conn.send(_end_txn_request(p, commit), 3)
                for p in group:
                    r = conn.receive(EndTxnResponse, 3)
                    answered += 1
                    if r.error_code != errors.OK:
                        left.append(p)
            except OSError:
                self._drop_node(node)
                left.extend(group[answered:])
        return left

    def _node(self, node_id: int, host: str, port: int) -> Conn:
        conn = self._nodes.get(node_id)
        if conn is None:
            conn = self._nodes[node_id] = Conn(host, port, self.timeout_s, self.security)
        return conn

    def _drop_node(self, node_id: int | None) -> None:
        conn = self._nodes.pop(node_id, None) if node_id is not None else None
        if conn is not None:
            conn.close()

    def _forget(self, key: str, key_type: int, broken: bool = True) -> None:
        """The coordinator of ``key`` moved (ask again) or its connection broke (close it)."""
        node = self._coords.pop((key_type, key), None)
        if broken:
            self._drop_node(node)

    def _each_broker(self, doing: str, req: Any, version: int, resp: Any) -> dict[int, Any]:
        """``req`` asked of every broker in the metadata, over connections kept open: each
        broker's answer by its node id."""
        def call() -> dict[int, Any]:
            out = {}
            for b in self.metadata([]).brokers:
                try:
                    r = self._node(b.node_id, b.host, b.port).request(req, version, resp)
                except OSError:
                    self._drop_node(b.node_id)
                    raise
                _check(r.error_code, doing)
                out[b.node_id] = r
            return out
        return self._retry(doing, call)

    def close(self) -> None:
        for c in self._nodes.values():
            c.close()
        self._coords.clear()
        self._nodes.clear()
        if self._any is not None:
            self._any.close()
            self._any = None

    def _retry(self, doing: str, fn: Callable[[], T], key: tuple[str, int] | None = None) -> T:
        """Retry retriable Kafka errors and dropped connections until the client timeout."""
        def forget(e: BaseException) -> None:
            moved = errors.coordinator_moved(getattr(e, "code", 0))
            if key is not None and (isinstance(e, OSError) or moved):
                self._forget(*key, broken=isinstance(e, OSError))
            if isinstance(e, OSError) and self._any is not None:
                self._any.close()
                self._any = None
                self._failed_nodes.add(self._any_node)

        return retry(fn, what=doing, retry_on=(_Retriable, OSError), timeout_s=self.budget_s,
                     backoff=Backoff(initial_s=0.02, max_s=0.5), on_retry=forget,
                     give_up=lambda e: RetriableCommitError(
                         f"{doing}: Kafka still answers {e} after {self.budget_s:.0f} s "
                         "(option kafka.delivery.timeout.ms)"))

    def _txn_call(self, tid: str, doing: str, req: Any, version: int, resp: Any,
                  code: Callable[[Any], int]) -> Any:
        def call() -> Any:
            r = self.coordinator(tid, 1).request(req, version, resp)
            _check(code(r), doing)
            return r
        return self._retry(doing, call, (tid, 1))

    # --- the transaction protocol ----------------------------------------------------------

    def init_producer(self, tid: str | None, timeout_ms: int) -> Producer:
        """A producer id and epoch for ``tid`` (``None``: idempotent, not transactional).

        For a transactional id this fences every older producer of the id and aborts the
        transaction it left open.
        """
        req = InitProducerIdRequest(transactional_id=tid, transaction_timeout_ms=timeout_ms,
                                    producer_id=-1, producer_epoch=-1)
        if tid is None:
            def call() -> Any:
                r = self.any_broker().request(req, 3, InitProducerIdResponse)
                _check(r.error_code, "getting an idempotent producer id")
                return r
            r = self._retry("getting an idempotent producer id", call)
        else:
            r = self._txn_call(tid, f"initialising transactional id {tid!r}", req, 3,
                               InitProducerIdResponse, lambda x: x.error_code)
        return Producer(tid or "", r.producer_id, r.producer_epoch)

    def add_partitions(self, p: Producer, parts: dict[str, list[int]]) -> None:
        T_ = AddPartitionsToTxnRequest.AddPartitionsToTxnTopic
        req = AddPartitionsToTxnRequest(
            v3_and_below_transactional_id=p.transactional_id, v3_and_below_producer_id=p.producer_id,
            v3_and_below_producer_epoch=p.epoch,
            v3_and_below_topics=[T_(name=t, partitions=sorted(ps)) for t, ps in parts.items()],
        )
        self._txn_call(p.transactional_id, f"adding partitions to {p.transactional_id!r}", req, 3,
                       AddPartitionsToTxnResponse, _worst_partition_error)

    def end_txn(self, p: Producer, commit: bool) -> None:
        """Commit or abort ``p``'s open transaction; raises ``FencedError`` if it is gone."""
        what = "committing" if commit else "aborting"
        self._txn_call(p.transactional_id, f"{what} transaction {p.transactional_id!r}",
                       _end_txn_request(p, commit), 3, EndTxnResponse, lambda x: x.error_code)

    def commit_offsets(self, p: Producer, group: str,
                       offsets: dict[tuple[str, int], tuple[int, str]]) -> None:
        """Commit consumer-group offsets inside ``p``'s transaction, then the transaction."""
        self.write_offsets(p, group, offsets)
        self.end_txn(p, commit=True)

    def write_offsets(self, p: Producer, group: str,
                      offsets: dict[tuple[str, int], tuple[int, str]]) -> None:
        """Add consumer-group offsets to ``p``'s transaction (pending until it ends)."""
        self._txn_call(p.transactional_id, f"adding group {group!r} to {p.transactional_id!r}",
                       AddOffsetsToTxnRequest(transactional_id=p.transactional_id, producer_id=p.producer_id,
                                              producer_epoch=p.epoch, group_id=group),
                       3, AddOffsetsToTxnResponse, lambda x: x.error_code)
        by_topic: dict[str, list[Any]] = {}
        P_ = TxnOffsetCommitRequest.TxnOffsetCommitRequestTopic.TxnOffsetCommitRequestPartition
        for (topic, part), (off, meta) in offsets.items():
            by_topic.setdefault(topic, []).append(
                P_(partition_index=part, committed_offset=off, committed_leader_epoch=-1,
                   committed_metadata=meta))
        req = TxnOffsetCommitRequest(
            transactional_id=p.transactional_id, group_id=group, producer_id=p.producer_id,
            producer_epoch=p.epoch, generation_id=-1, member_id="", group_instance_id=None,
            topics=[TxnOffsetCommitRequest.TxnOffsetCommitRequestTopic(name=t, partitions=ps)
                    for t, ps in by_topic.items()],
        )

        def call() -> None:
            r = self.coordinator(group, 0).request(req, 3, TxnOffsetCommitResponse)
            _check(max((q.error_code for t in r.topics for q in t.partitions), default=0),
                   f"committing offsets of group {group!r}")
        self._retry(f"committing offsets of group {group!r}", call, (group, 0))

    def keep_offsets(self, group: str, offsets: dict[tuple[str, int], tuple[int, str]],
                     retention_ms: int) -> None:
        """Commit consumer-group offsets outside any transaction, kept ``retention_ms``.

        OffsetCommit v4 is the last version with a per-commit retention: the broker
        stores an expiry time with the offset and ignores ``offsets.retention.minutes``
        for it (KIP-211 kept this "old expiration semantics" for such commits)."""
        P_ = OffsetCommitRequest.OffsetCommitRequestTopic.OffsetCommitRequestPartition
        by_topic: dict[str, list[Any]] = {}
        for (topic, part), (off, meta) in offsets.items():
            by_topic.setdefault(topic, []).append(
                P_(partition_index=part, committed_offset=off, committed_metadata=meta))
        req = OffsetCommitRequest(
            group_id=group, generation_id_or_member_epoch=-1, member_id="", retention_time_ms=retention_ms,
            topics=[OffsetCommitRequest.OffsetCommitRequestTopic(name=t, partitions=ps)
                    for t, ps in by_topic.items()])

        def call() -> None:
            r = self.coordinator(group, 0).request(req, 4, OffsetCommitResponse)
            _check(max((q.error_code for t in r.topics for q in t.partitions), default=0),
                   f"keeping offsets of group {group!r}")
        self._retry(f"keeping offsets of group {group!r}", call, (group, 0))

    def fetch_offsets(self, group: str, topic: str, parts: list[int],
                      stable: bool = True) -> dict[int, tuple[int, str]]:
        """Committed (offset, metadata) per partition; -1 where none. ``stable``: wait out
        offsets pending in an open transaction (else: the last committed ones)."""
        req = OffsetFetchRequest(group_id=group, require_stable=stable, topics=[
            OffsetFetchRequest.OffsetFetchRequestTopic(name=topic, partition_indexes=parts)])

        def call() -> dict[int, tuple[int, str]]:
            r = self.coordinator(group, 0).request(req, 7, OffsetFetchResponse)
            _check(r.error_code, f"reading offsets of group {group!r}")
            out = {}
            for t in r.topics:
                for q in t.partitions:
                    _check(q.error_code, f"reading offsets of group {group!r}")
                    out[q.partition_index] = (q.committed_offset, q.metadata or "")
            return out
        return self._retry(f"reading offsets of group {group!r}", call, (group, 0))

    def list_transactions(self, pattern: str, states: list[str]) -> list[tuple[str, int, str]]:
        """(transactional id, producer id, state) of every transaction matching ``pattern``."""
        req = ListTransactionsRequest(state_filters=states, producer_id_filters=[],
                                      duration_filter=-1, transactional_id_pattern=pattern)
        # each broker answers for the coordinators it hosts
        return [(s.transactional_id, s.producer_id, s.transaction_state)
                for r in self._each_broker("listing transactions", req, 2, ListTransactionsResponse).values()
                for s in r.transaction_states]

    def list_groups(self) -> list[str]:
        """Every consumer group's id (each broker answers for the groups it coordinates)."""
        return [g for gs in self.groups_by_broker().values() for g in gs]

    def groups_by_broker(self) -> dict[int, list[str]]:
        """Every consumer group's id, by the broker that coordinates it (each answers for its own)."""
        req = ListGroupsRequest(states_filter=[])
        answers = self._each_broker("listing consumer groups", req, 4, ListGroupsResponse)
        return {node: [g.group_id for g in r.groups] for node, r in answers.items()}

    def fetch_offsets_of_groups(self, groups: dict[int, list[str]], topic: str,
                                parts: list[int]) -> dict[str, dict[int, tuple[int, str]]]:
        """``fetch_offsets`` of many groups, one OffsetFetch (v8: many groups a request) per
        coordinating broker (``groups_by_broker``'s answer) instead of a round trip a group.
        A group its broker no longer coordinates (it moved since the listing) is asked alone."""
        out: dict[str, dict[int, tuple[int, str]]] = {}
        alone: list[str] = []
        G = OffsetFetchRequest.OffsetFetchRequestGroup
        T_ = G.OffsetFetchRequestTopics
        for node, names in groups.items():
            conn = self._nodes.get(node)
            if not names:
                continue
            if conn is None:
                alone += names
                continue
            req = OffsetFetchRequest(require_stable=True, groups=[
                G(group_id=g, topics=[T_(name=topic, partition_indexes=parts)]) for g in names])
            try:
                r = conn.request(req, 8, OffsetFetchResponse)
            except OSError:
                self._drop_node(node)
                alone += names
                continue
            for g in r.groups:
                codes = [g.error_code] + [q.error_code for t in g.topics for q in t.partitions]
                if any(codes):
                    alone.append(g.group_id)
                    continue
                out[g.group_id] = {q.partition_index: (q.committed_offset, q.metadata or "")
                                   for t in g.topics for q in t.partitions}
            alone += [g for g in names if g not in out and g not in alone]
        for g in alone:
            out[g] = self.fetch_offsets(g, topic, parts)
        return out

    def describe(self, tids: list[str]) -> dict[str, TxnState]:
        """DescribeTransactions for ``tids``: one lookup of their coordinators, then one
        request per coordinator naming every id it coordinates (a read, so a round that
        meets a moved coordinator asks again)."""
        wanted = list(dict.fromkeys(tids))

        def call() -> dict[str, Any]:
            self.coordinators(wanted, 1)
            by_node: dict[int, list[str]] = {}
            for tid in wanted:
                self.coordinator(tid, 1)
                by_node.setdefault(self._coords[(1, tid)], []).append(tid)
            states: dict[str, Any] = {}
            for node, group in by_node.items():
                try:
                    r = self._nodes[node].request(DescribeTransactionsRequest(transactional_ids=group), 0,
                                                  DescribeTransactionsResponse)
                except OSError:
                    for tid in group:
                        self._forget(tid, 1)
                    raise
                for st in r.transaction_states:
                    if errors.coordinator_moved(st.error_code):
                        self._forget(st.transactional_id, 1, broken=False)
                    if not errors.matches(st.error_code, TransactionalIdNotFoundError):
                        _check(st.error_code, f"describing transaction {st.transactional_id!r}")
                    states[st.transactional_id] = st
            return states

        found = self._retry(f"describing {len(wanted)} transaction(s)", call)
        out: dict[str, TxnState] = {}
        for tid in wanted:
            st = found[tid]
            if errors.matches(st.error_code, TransactionalIdNotFoundError):  # transactional.id.expiration.ms
                out[tid] = TxnState(tid, "NotFound", -1, -1, 0, 0)
                continue
            parts = tuple(sorted((t.topic, p) for t in (st.topics or []) for p in t.partitions))
            out[tid] = TxnState(tid, st.transaction_state, st.producer_id, st.producer_epoch,
                                st.transaction_start_time_ms, st.transaction_timeout_ms, parts)
        return out

    def broker_config(self, name: str, topic: str | None = None) -> str | None:
        """A broker setting, as a reachable broker reports it for itself, or with ``topic``
        that topic's (its own or the broker default it inherits)."""
        if topic is None:
            return self.configs(broker=[name])[0].get(name)
        return self.configs(topic=topic, topic_keys=[name])[1].get(name)

    def configs(self, broker: Sequence[str] = (), topic: str | None = None,
                topic_keys: Sequence[str] = ()) -> tuple[dict[str, str | None], dict[str, str | None]]:
        """Settings of a reachable broker (as it reports them for itself) and of ``topic``,
        in one DescribeConfigs request. A broker just killed may still be listed in the
        metadata: a refused connection moves on to another (``_retry``), within the client's
        budget. A setting the broker did not report (or would not: an ACL) is absent."""
        R_ = DescribeConfigsRequest.DescribeConfigsResource

        def call() -> tuple[dict[str, str | None], dict[str, str | None]]:
            conn = self.any_broker()  # sets _any_node: a broker describes its own settings
            asked = []
            if broker:
                asked.append(R_(resource_type=4, resource_name=str(self._any_node),
                                configuration_keys=list(broker)))
            if topic is not None and topic_keys:
                asked.append(R_(resource_type=2, resource_name=topic, configuration_keys=list(topic_keys)))
            out: tuple[dict[str, str | None], dict[str, str | None]] = ({}, {})
            if not asked:
                return out
            r = conn.request(DescribeConfigsRequest(resources=asked, include_synonyms=False,
                                                    include_documentation=False), 4, DescribeConfigsResponse)
            for res in r.results:
                into = out[0] if res.resource_type == 4 else out[1]
                for c in res.configs:
                    into[c.name] = str(c.value) if c.value is not None else None
            return out
        return self._retry("reading broker and topic settings", call)


# Clients this process keeps between calls. Spark reuses the driver's planning and commit
# workers (and executors' Python workers) from batch to batch, so a client kept here, with
# its connections and the coordinators it found, serves the next batch instead of about a
# dozen new connections (and TLS and SASL handshakes) every time. A connection that broke
# meanwhile (a broker restarted, a coordinator moved, the broker's idle timeout) fails its
# next request and is dropped and found anew by the client's retries; a client whose call
# raised is closed, never kept, since a request cut off may have left a reply unread.
_KEPT = 8
_kept: OrderedDict[tuple[Any, ...], KafkaTxnClient] = OrderedDict()
_kept_lock = threading.Lock()


@contextmanager
def kept_client(bootstrap: str, timeout_s: float = 30.0, security: KafkaSecurity = PLAINTEXT,
                budget_s: float | None = None) -> Iterator[KafkaTxnClient]:
    """A client of this process's keeping (or a new one), for one call: kept again after
    it, closed if the call raised. The client's settings are its key (a changed password
    or timeout gets a client of its own); one user at a time."""
    key = (bootstrap, timeout_s, security, budget_s)
    with _kept_lock:
        client = _kept.pop(key, None)
    if client is None:
        client = KafkaTxnClient(bootstrap, timeout_s, security, budget_s)
    try:
        yield client
    except BaseException:
        client.close()
        raise
    with _kept_lock:
        earlier = _kept.pop(key, None)
        _kept[key] = client
        while len(_kept) > _KEPT:
            _kept.popitem(last=False)[1].close()
    if earlier is not None:
        earlier.close()  # another user's, given back while this one was out


def _end_txn_request(p: Producer, commit: bool) -> Any:
    return EndTxnRequest(transactional_id=p.transactional_id, producer_id=p.producer_id,
                         producer_epoch=p.epoch, committed=commit)


class _Retriable(Exception):
    def __init__(self, code: int, doing: str) -> None:
        super().__init__(f"{error_name(code)} while {doing}")
        self.code = code


def _check(code: int, doing: str) -> None:
    if code == 0:
        return
    # Coordinator moving or loading, a previous transaction's markers still being written,
    # pending transactional offsets: each resolves itself within seconds.
    if errors.is_retriable(code):
        raise _Retriable(code, doing)
    if errors.is_fenced(code):
        raise FencedError(f"{doing}: fenced by Kafka ({error_name(code)}): a newer run or task attempt "
                          "took over this transactional id, or the transaction was aborted by its timeout")
    if errors.is_not_open(code):
        raise FatalCommitError(f"{doing}: {error_name(code)}: the transaction is no longer open")
    raise ConnectorError(f"{doing}: Kafka answered {error_name(code)}")


def _worst_partition_error(r: Any) -> int:
    codes = [q.partition_error_code for t in r.results_by_topic_v3_and_below for q in t.results_by_partition]
    return next((c for c in codes if c != 0), 0)
