package dev.sparkext.peers;

import org.apache.flink.api.common.JobID;
import org.apache.flink.api.common.eventtime.WatermarkStrategy;
import org.apache.flink.api.common.typeinfo.TypeInformation;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.api.java.tuple.Tuple2;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.configuration.JobManagerOptions;
import org.apache.flink.configuration.RestOptions;
import org.apache.flink.configuration.TaskManagerOptions;
import org.apache.flink.connector.base.DeliveryGuarantee;
import org.apache.flink.connector.kafka.sink.KafkaRecordSerializationSchema;
import org.apache.flink.connector.kafka.sink.KafkaSink;
import org.apache.flink.connector.kafka.source.KafkaSource;
import org.apache.flink.connector.kafka.source.enumerator.initializer.OffsetsInitializer;
import org.apache.flink.connector.kafka.source.reader.deserializer.KafkaRecordDeserializationSchema;
import org.apache.flink.core.execution.CheckpointingMode;
import org.apache.flink.runtime.jobgraph.JobGraph;
import org.apache.flink.runtime.minicluster.MiniCluster;
import org.apache.flink.runtime.minicluster.MiniClusterConfiguration;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.util.Collector;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.producer.ProducerRecord;

/**
 * Flink KafkaSource -> KafkaSink(EXACTLY_ONCE) in a local MiniCluster, parallelism 2,
 * checkpoint interval = the bench's trigger interval. Timed from job submission (the
 * MiniCluster already up, as our Spark session is) to the last record visible
 * read_committed; then the job is cancelled.
 */
public final class FlinkCopy {
    /** Key and value bytes as they came; the timestamp travels with the record. */
    static final class KeyValueIn implements KafkaRecordDeserializationSchema<Tuple2<byte[], byte[]>> {
        @Override
        public void deserialize(ConsumerRecord<byte[], byte[]> r, Collector<Tuple2<byte[], byte[]>> out) {
            out.collect(Tuple2.of(r.key(), r.value()));
        }

        @Override
        public TypeInformation<Tuple2<byte[], byte[]>> getProducedType() {
            return Types.TUPLE(Types.PRIMITIVE_ARRAY(Types.BYTE), Types.PRIMITIVE_ARRAY(Types.BYTE));
        }
    }

    static final class KeyValueOut implements KafkaRecordSerializationSchema<Tuple2<byte[], byte[]>> {
        private final String topic;

        KeyValueOut(String topic) {
            this.topic = topic;
        }

        @Override
        public ProducerRecord<byte[], byte[]> serialize(
                Tuple2<byte[], byte[]> kv, KafkaSinkContext ctx, Long timestamp) {
            return new ProducerRecord<>(topic, null, timestamp, kv.f0, kv.f1);
        }
    }

    public static void main(String[] args) throws Exception {
        PeerRun run = PeerRun.parse("FlinkCopy", args);
        StreamExecutionEnvironment env = StreamExecutionEnvironment.getExecutionEnvironment();
        env.setParallelism(2);
        env.enableCheckpointing(run.intervalMs, CheckpointingMode.EXACTLY_ONCE);

        KafkaSource<Tuple2<byte[], byte[]>> source = KafkaSource.<Tuple2<byte[], byte[]>>builder()
                .setBootstrapServers(run.bootstrap)
                .setTopics(run.input)
                .setGroupId(run.txnPrefix)
                .setStartingOffsets(OffsetsInitializer.earliest())
                .setDeserializer(new KeyValueIn())
                .build();
        KafkaSink<Tuple2<byte[], byte[]>> sink = KafkaSink.<Tuple2<byte[], byte[]>>builder()
                .setBootstrapServers(run.bootstrap)
                .setRecordSerializer(new KeyValueOut(run.output))
                .setDeliveryGuarantee(DeliveryGuarantee.EXACTLY_ONCE)
                .setTransactionalIdPrefix(run.txnPrefix)
                // Flink's default (1 h) exceeds the broker's transaction.max.timeout.ms (15 min).
                .setProperty("transaction.timeout.ms", "600000")
                .build();
        env.fromSource(source, WatermarkStrategy.noWatermarks(), "kafka-in").sinkTo(sink).name("kafka-out");
        JobGraph job = env.getStreamGraph().getJobGraph();

        // Loopback only, and an ephemeral REST port: never collide with another local Flink.
        Configuration conf = new Configuration();
        conf.set(RestOptions.BIND_ADDRESS, "127.0.0.1");
        conf.set(RestOptions.BIND_PORT, "0");
        conf.set(JobManagerOptions.BIND_HOST, "127.0.0.1");
        conf.set(TaskManagerOptions.BIND_HOST, "127.0.0.1");
        conf.set(TaskManagerOptions.HOST, "127.0.0.1");
        MiniClusterConfiguration mc = new MiniClusterConfiguration.Builder()
                .setConfiguration(conf)
                .setNumTaskManagers(1)
                .setNumSlotsPerTaskManager(2)
                .build();
        try (MiniCluster cluster = new MiniCluster(mc)) {
            cluster.start();
            long t0 = System.nanoTime();
            JobID id = cluster.submitJob(job).get().getJobID();
            boolean done = run.awaitOutput();
            long t1 = System.nanoTime();
            cluster.cancelJob(id).get();
            if (!done) {
                System.exit(1);
            }
            run.report("flink", t0, t1);
        }
    }
}
