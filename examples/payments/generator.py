"""Payment events for the payments job, as a bank would send them, into Kafka.

Each event is JSON ``{"payment_id", "account", "amount", "currency", "event_time"}``,
keyed by account. Event time advances ``--per-second`` payments per simulated second from a
fixed start; about 5 % arrive up to 5 s out of order, and about 3 % are re-sent by the
bank a little later with the same payment id and content. The same ``--seed`` gives the
same events. Run: ``python -m examples.payments.generator --bootstrap 127.0.0.1:9092``.
"""

from __future__ import annotations

import argparse
import json
import random
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

START = datetime(2026, 1, 1, tzinfo=UTC)
CURRENCIES = ("EUR", "USD", "GBP")


@dataclass(frozen=True)
class Payment:
    payment_id: str
    account: str
    amount: float
    currency: str
    event_time: datetime

    def to_json(self) -> bytes:
        return json.dumps({"payment_id": self.payment_id, "account": self.account, "amount": self.amount,
                           "currency": self.currency,
                           "event_time": self.event_time.isoformat(timespec="milliseconds").replace(
                               "+00:00", "Z")}).encode()


def events(count: int, *, accounts: int = 20, per_second: int = 50, seed: int = 7) -> Iterator[Payment]:
    """``count`` payments in arrival order, re-sent copies included (so more than ``count``)."""
    rng = random.Random(seed)
    resend: list[tuple[int, Payment]] = []  # (arrival index to re-send at, payment)
    for i in range(count):
        t = START + timedelta(seconds=i / per_second)
        if rng.random() < 0.05:  # out of order: stamped up to 5 s before its neighbours
            t -= timedelta(milliseconds=rng.randrange(1, 5000))
        p = Payment(f"pay-{seed}-{i:07d}", f"acct-{rng.randrange(accounts):02d}",
                    round(rng.lognormvariate(3.5, 1.0), 2), rng.choice(CURRENCIES), t)
        yield p
        if rng.random() < 0.03:
            resend.append((i + rng.randrange(1, 200), p))
        while resend and resend[0][0] <= i:
            yield resend.pop(0)[1]
    for _at, p in resend:
        yield p


def ensure_topic(bootstrap: str, topic: str, partitions: int) -> None:
    """Create ``topic`` unless it exists, and wait until every partition has a leader."""
    from kafka import KafkaAdminClient, KafkaConsumer
    from kafka.admin import NewTopic
    from kafka.errors import TopicAlreadyExistsError

    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics([NewTopic(topic, partitions, 1)])
    except TopicAlreadyExistsError:
        pass
    finally:
        admin.close()
    consumer = KafkaConsumer(bootstrap_servers=bootstrap)
    try:
        deadline = time.monotonic() + 30
        while len(consumer.partitions_for_topic(topic) or ()) < partitions:
            if time.monotonic() > deadline:
                raise TimeoutError(f"topic {topic} has no leaders after 30 s")
            time.sleep(0.2)
    finally:
        consumer.close()


def send(bootstrap: str, topic: str, payments: Iterator[Payment], rate: float) -> int:
    """Send at about ``rate`` events/s (acks=all); returns how many were sent."""
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5)
    sent, began = 0, time.monotonic()
    try:
        for p in payments:
            producer.send(topic, key=p.account.encode(), value=p.to_json())
            sent += 1
            ahead = sent / rate - (time.monotonic() - began)
            if ahead > 0.05:
                time.sleep(ahead)
        producer.flush()
    finally:
        producer.close()
    return sent


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="payments-generator", description=__doc__.split("\n")[0])
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--topic", default="payments")
    ap.add_argument("--partitions", type=int, default=3)
    ap.add_argument("--count", type=int, default=20000, help="distinct payments (re-sent copies come on top)")
    ap.add_argument("--rate", type=float, default=1000.0, help="events per second")
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args(argv)
    ensure_topic(args.bootstrap, args.topic, args.partitions)
    n = send(args.bootstrap, args.topic, events(args.count, seed=args.seed), args.rate)
    print(f"sent {n} events ({args.count} payments) to {args.topic}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
