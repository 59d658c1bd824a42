"""Queue sink: ``hzsink`` connector ``jms`` (ActiveMQ Artemis over STOMP)."""

from __future__ import annotations

import json
import logging
from typing import Any, Protocol

from pyspark.sql.types import StructType

from spark_ext.commit import Claim
from spark_ext.connector import SinkConnector
from spark_ext.connectors.jms.session import ConnectorError, ManagementError, QueueMissingError
from spark_ext.connectors.jms.sink.committer import JmsCommitter
from spark_ext.connectors.jms.sink.config import SINK_OPTIONS, JmsSinkConfig
from spark_ext.connectors.jms.sink.entries import PART, SIZE_LIMIT_SETTING
from spark_ext.connectors.jms.sink.records import check_schema
from spark_ext.connectors.jms.sink.writer import (
    JmsWriter,
    PlainJmsWriter,
    StagingJmsWriter,
    TransactionalJmsWriter,
    open_session,
)
from spark_ext.errors import ConfigurationError
from spark_ext.guarantees import Guarantee
from spark_ext.options import Options

log = logging.getLogger(__name__)

#: The log's compare-and-set needs the ids of a few recent entries remembered, across restarts.
MIN_ID_CACHE = 100


class BrokerAttributes(Protocol):
    def attribute(self, resource: str, name: str) -> Any: ...


class BrokerSettingError(ConfigurationError):
    """The broker runs with a setting exactly-once cannot be made safe with."""


class JmsSink(SinkConnector[JmsSinkConfig]):
    """``df.writeStream.format("hzsink").option("connector", "jms")``."""

    name = "jms"
    option_spec = SINK_OPTIONS

    def configure(self, options: Options, schema: StructType, guarantee: Guarantee) -> JmsSinkConfig:
        cfg = JmsSinkConfig.parse(options, guarantee)
        check_schema({f.name: f.dataType.simpleString() for f in schema.fields}, cfg.where)
        return cfg

    def validate(self, config: JmsSinkConfig, schema: StructType) -> JmsSinkConfig:
        """Step 1: the broker takes our login and, for exactly-once, our management calls and
        the settings the sink's log relies on."""
        with open_session(config) as session:
            if config.guarantee is Guarantee.EXACTLY_ONCE:
                addresses = (config.staging, config.log, config.queue)
                values = session.gather([("broker", name, None) for name in BROKER_ATTRIBUTES]
                                        + [("broker", "getAddressSettingsAsJSON", [a]) for a in addresses])
                _check_broker(dict(zip(BROKER_ATTRIBUTES, values, strict=False)))
                for address, settings in zip(addresses, values[len(BROKER_ATTRIBUTES):], strict=True):
                    _check_address(json.loads(settings), address, own=address != config.queue)
            else:
                _refuse_if_left_staged(session, config)
        return config

    def sets_aside(self, config: JmsSinkConfig) -> str | None:
        return None  # rows that cannot be messages are found before they are sent (records.py)

    def new_writer(self, config: JmsSinkConfig, claim: Claim[int] | None) -> JmsWriter:
        if config.guarantee is Guarantee.EXACTLY_ONCE:
            assert claim is not None, "exactly_once plans take the sink over first"
            return StagingJmsWriter(config, claim)
        if config.guarantee is Guarantee.AT_LEAST_ONCE:
            return TransactionalJmsWriter(config)
        return PlainJmsWriter(config)

    def new_committer(self, config: JmsSinkConfig) -> JmsCommitter:
        return JmsCommitter(config)

    def target(self, config: JmsSinkConfig) -> str:
        return f"stomp://{config.host}:{config.port}{config.destination}"


def _refuse_if_left_staged(session: BrokerAttributes, cfg: JmsSinkConfig) -> None:
    """A weaker run never takes the sink over, so what an exactly_once run of this sink left
    staged would stay there (a decided batch, written again by this run, and moved a second
    time by a later exactly_once run): refuse, naming the ways out."""
    try:
        staged = int(session.attribute(f"queue.{cfg.staging}", "MessageCount"))
    except QueueMissingError:
        return  # the sink never ran with exactly_once
    except ManagementError as e:  # a weaker guarantee does not need the manage permission
        log.warning("could not count the staged messages of sink %r (%s); a weaker guarantee cannot tell "
                    "whether an exactly_once run of this sink left some", cfg.sink_id, e)
        return
    if staged:
        raise ConnectorError(
            f"{staged} message(s) of sink {cfg.sink_id!r} are still in its staging queue {cfg.staging}, left "
            f"by an exactly_once run of this sink, and this query runs with guarantee {cfg.guarantee.value}: "
            "restart it once with guarantee exactly_once to finish them, or resolve them with 'spark-ext "
            "doctor jms resolve', then change the guarantee")


#: The broker's attributes ``_check_broker`` reads.
BROKER_ATTRIBUTES = ("PersistenceEnabled", "PersistIDCache", "IDCacheSize")


def _check_broker(values: dict[str, Any]) -> None:
    """The broker-wide settings exactly-once relies on (``BROKER_ATTRIBUTES``, as read)."""
    if not values["PersistenceEnabled"]:
        raise BrokerSettingError(
            "the broker runs with persistence-enabled=false: a restart would lose staged and decided "
            "messages. Enable persistence in broker.xml, or use guarantee at_least_once")
    if not values["PersistIDCache"]:
        raise BrokerSettingError(
            "the broker runs with persist-id-cache=false: after a restart two runs of the sink could both "
            "record a decision. Set persist-id-cache to true in broker.xml")
    size = int(values["IDCacheSize"])
    if size < MIN_ID_CACHE:
        raise BrokerSettingError(
            f"the broker's id-cache-size is {size}: the sink's log (compare-and-set by duplicate id) needs "
            f"at least {MIN_ID_CACHE}. Raise id-cache-size in broker.xml (the default is 20000)")


def _check_address(settings: dict[str, Any], address: str, own: bool = True) -> None:
    """The address settings a user's broker.xml may give the sink's own queues (a match on
    ``#`` or ``spark_ext.#`` reaches them) and its destination: an expiry would drop staged
    messages of a decided batch while the query is down; a management attribute limit under
    the log's part size would cut its entries when they are read back; a full address that
    drops (or fails) what is routed to it would silently drop staged messages, log entries
    or, for the destination, the decided batch's messages the broker moves in."""
    fix = "for 'spark_ext.#'" if own else f"for {address!r}"
    policy = str(settings.get("addressFullMessagePolicy", "PAGE")).upper()
    if policy in ("DROP", "FAIL"):
        raise BrokerSettingError(
            f"the broker gives address {address} address-full-policy={policy}: once the address is full "
            "(max-size-bytes, max-size-messages or the broker's global-max-size) the broker drops what "
            "is routed to it, and the messages the sink moves in when a batch is decided would be lost "
            f"without an error. Set address-full-policy to PAGE (the default) {fix} in broker.xml, or "
            "use guarantee at_least_once")
    if not own:
        return
    for key, setting in (("expiryDelay", "expiry-delay"), ("maxExpiryDelay", "max-expiry-delay")):
        delay = int(settings.get(key, -1))
        if delay > 0 and not settings.get("noExpiry", False):
            raise BrokerSettingError(
                f"the broker gives address {address} {setting}={delay} ms: staged messages of a decided "
                "batch would expire while the query is down, and the batch would be lost. Exclude the sink's "
                f"addresses with an address-setting match 'spark_ext.#' that sets {setting} to -1 (or "
                "no-expiry to true) in broker.xml")
    limit = int(settings.get("managementMessageAttributeSizeLimit", 256))
    if 0 <= limit < PART:
        raise BrokerSettingError(
            f"the broker gives address {address} {SIZE_LIMIT_SETTING}={limit}: the sink reads its log back "
            f"through management in parts of {PART} characters, which would be cut. Set it to at least "
            f"{PART} (the default is 256) for 'spark_ext.#' in broker.xml")
