package dev.sparkext.peers;

import java.nio.file.Files;
import java.time.Duration;
import java.util.Properties;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Produced;

/**
 * Kafka Streams copying INPUT to OUTPUT with processing.guarantee=exactly_once_v2 and
 * commit.interval.ms = the bench's trigger interval; two stream threads (local[2] and
 * Flink's parallelism 2). Timed from start() to the last record visible read_committed.
 */
public final class StreamsCopy {
    public static void main(String[] args) throws Exception {
        PeerRun run = PeerRun.parse("StreamsCopy", args);
        Properties p = new Properties();
        // application.id names the consumer group and, under exactly_once_v2, the
        // transactional ids (<application.id>-<process id>-<thread>).
        p.put(StreamsConfig.APPLICATION_ID_CONFIG, run.txnPrefix);
        p.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, run.bootstrap);
        p.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.EXACTLY_ONCE_V2);
        p.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, run.intervalMs);
        p.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, 2);
        p.put(StreamsConfig.STATE_DIR_CONFIG, Files.createTempDirectory("peer-streams").toString());
        p.put(StreamsConfig.consumerPrefix(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG), "earliest");

        StreamsBuilder b = new StreamsBuilder();
        b.stream(run.input, Consumed.with(Serdes.ByteArray(), Serdes.ByteArray()))
                .to(run.output, Produced.with(Serdes.ByteArray(), Serdes.ByteArray()));

        try (KafkaStreams streams = new KafkaStreams(b.build(), p)) {
            long t0 = System.nanoTime();
            streams.start();
            boolean done = run.awaitOutput();
            long t1 = System.nanoTime();
            streams.close(Duration.ofSeconds(30));
            if (!done) {
                System.exit(1);
            }
            run.report("kafka_streams", t0, t1);
        }
    }
}
