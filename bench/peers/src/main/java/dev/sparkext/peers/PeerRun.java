package dev.sparkext.peers;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Properties;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

/**
 * What both peers share: the command line, and the stop condition (the output topic holds
 * the expected number of records for a read_committed consumer).
 *
 * <p>Arguments: bootstrap input output expected intervalMs txnPrefix [timeoutS].
 */
final class PeerRun {
    final String bootstrap;
    final String input;
    final String output;
    final long expected;
    final long intervalMs;
    final String txnPrefix;
    final long timeoutS;

    private PeerRun(String[] a) {
        bootstrap = a[0];
        input = a[1];
        output = a[2];
        expected = Long.parseLong(a[3]);
        intervalMs = Long.parseLong(a[4]);
        txnPrefix = a[5];
        timeoutS = a.length > 6 ? Long.parseLong(a[6]) : 600;
    }

    static PeerRun parse(String engine, String[] args) {
        if (args.length < 6) {
            System.err.println("usage: " + engine
                    + " BOOTSTRAP INPUT OUTPUT EXPECTED INTERVAL_MS TXN_PREFIX [TIMEOUT_S]");
            System.exit(2);
        }
        return new PeerRun(args);
    }

    /**
     * Blocks until a read_committed consumer has seen {@code expected} records on the
     * output topic (counted from its start); false on timeout. Counting, not comparing:
     * the bench reads the output again afterwards and checks every record is there once.
     */
    boolean awaitOutput() {
        Properties p = new Properties();
        p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
        p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        p.put(ConsumerConfig.FETCH_MAX_WAIT_MS_CONFIG, "50"); // stop soon after the last commit
        long deadline = System.nanoTime() + Duration.ofSeconds(timeoutS).toNanos();
        try (KafkaConsumer<byte[], byte[]> c =
                new KafkaConsumer<>(p, new ByteArrayDeserializer(), new ByteArrayDeserializer())) {
            List<TopicPartition> tps = new ArrayList<>();
            for (PartitionInfo pi : c.partitionsFor(output)) {
                tps.add(new TopicPartition(output, pi.partition()));
            }
            c.assign(tps);
            c.seekToBeginning(tps);
            long seen = 0;
            while (seen < expected) {
                if (System.nanoTime() > deadline) {
                    System.err.printf("timed out: %d of %d records on %s%n", seen, expected, output);
                    return false;
                }
                seen += c.poll(Duration.ofMillis(100)).count();
            }
            return true;
        }
    }

    /** The one line the bench parses. */
    void report(String engine, long startNanos, long endNanos) {
        double s = (endNanos - startNanos) / 1e9;
        System.out.printf("PEER engine=%s records=%d seconds=%.3f rate=%.1f interval_ms=%d%n",
                engine, expected, s, expected / s, intervalMs);
        System.out.flush();
    }
}
