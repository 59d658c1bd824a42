// Kafka's own Java client as the reference for spark-ext's record-batch decoder
// (tests/test_kafka_codec.py). Run as a single source file:
//   java -cp '<kafka libs>/*' KafkaCodecPeer.java produce BOOTSTRAP TOPIC
//   java -cp '<kafka libs>/*' KafkaCodecPeer.java consume BOOTSTRAP TOPIC read_committed|read_uncommitted
// produce: one partition's worth of every codec, null and empty keys and values, headers (a
// null header value too), explicit timestamps, and transactions committed and aborted,
// interleaved with plain writes. consume: every record of partition 0 the consumer returns
// under that isolation, one line each (offset, timestamp, type, key, value, headers; bytes
// as hex, "-" for null), then "END <offset>": the end offset that isolation reads up to.
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.*;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.internals.RecordHeader;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public class KafkaCodecPeer {
  static final long T0 = 1_700_000_000_000L;

  static KafkaProducer<byte[], byte[]> producer(String bootstrap, String codec, String txnId) {
    Properties p = new Properties();
    p.put("bootstrap.servers", bootstrap);
    p.put("compression.type", codec);
    p.put("linger.ms", "20");
    p.put("batch.size", "4096");
    if (txnId != null) p.put("transactional.id", txnId);
    return new KafkaProducer<>(p, new ByteArraySerializer(), new ByteArraySerializer());
  }

  static byte[] b(String s) { return s == null ? null : s.getBytes(StandardCharsets.UTF_8); }

  static ProducerRecord<byte[], byte[]> record(String topic, int i, String tag) {
    byte[] key = i % 7 == 0 ? null : i % 11 == 0 ? new byte[0] : b(tag + "-k" + (i % 5));
    byte[] value = i % 13 == 0 ? null : b(tag + "-v" + i + "-" + "x".repeat(i % 40));
    List<Header> headers = new ArrayList<>();
    for (int h = 0; h < i % 3; h++) {
      headers.add(new RecordHeader("h" + h, h == 1 && i % 2 == 0 ? null : b(tag + i + "/" + h)));
    }
    return new ProducerRecord<>(topic, 0, T0 + i * 37L, key, value, headers);
  }

  static void produce(String bootstrap, String topic) throws Exception {
    int i = 0;
    for (String codec : new String[] {"none", "gzip", "snappy", "lz4", "zstd"}) {
      try (KafkaProducer<byte[], byte[]> p = producer(bootstrap, codec, null)) {
        for (int n = 0; n < 150; n++) p.send(record(topic, i++, codec));
        p.flush();
      }
    }
    String[][] txns = {{"gzip", "commit"}, {"lz4", "abort"}, {"zstd", "commit"}, {"snappy", "abort"},
        {"none", "commit"}};
    try (KafkaProducer<byte[], byte[]> t = producer(bootstrap, "none", topic + "-txn");
         KafkaProducer<byte[], byte[]> plain = producer(bootstrap, "lz4", null)) {
      t.initTransactions();
      for (String[] txn : txns) {
        // The transactional producer's own codec is fixed: a producer per codec would each
        // need a transactional id; mixing the codecs of other writers in between covers both.
        t.beginTransaction();
        for (int n = 0; n < 60; n++) {
          t.send(record(topic, i++, "txn-" + txn[1]));
          if (n % 20 == 0) plain.send(record(topic, i++, "plain")).get();
        }
        t.flush();
        if (txn[1].equals("commit")) t.commitTransaction(); else t.abortTransaction();
      }
    }
    try (KafkaProducer<byte[], byte[]> t = producer(bootstrap, "gzip", topic + "-txn-gz")) {
      t.initTransactions();
      t.beginTransaction();
      for (int n = 0; n < 40; n++) t.send(record(topic, i++, "gz-abort"));
      t.abortTransaction();
      t.beginTransaction();
      for (int n = 0; n < 40; n++) t.send(record(topic, i++, "gz-commit"));
      t.commitTransaction();
    }
  }

  static String hex(byte[] v) {
    if (v == null) return "-";
    StringBuilder s = new StringBuilder();
    for (byte x : v) s.append(String.format("%02x", x));
    return s.toString();
  }

  static void consume(String bootstrap, String topic, String isolation) {
    Properties p = new Properties();
    p.put("bootstrap.servers", bootstrap);
    p.put("isolation.level", isolation);
    p.put("enable.auto.commit", "false");
    TopicPartition tp = new TopicPartition(topic, 0);
    try (KafkaConsumer<byte[], byte[]> c =
             new KafkaConsumer<>(p, new ByteArrayDeserializer(), new ByteArrayDeserializer())) {
      c.assign(List.of(tp));
      c.seekToBeginning(List.of(tp));
      long end = c.endOffsets(List.of(tp)).get(tp);
      StringBuilder out = new StringBuilder();
      long deadline = System.currentTimeMillis() + 60_000;
      while (c.position(tp) < end && System.currentTimeMillis() < deadline) {
        for (ConsumerRecord<byte[], byte[]> r : c.poll(Duration.ofMillis(500))) {
          StringBuilder h = new StringBuilder();
          for (Header x : r.headers()) h.append(x.key()).append('=').append(hex(x.value())).append(';');
          out.append(r.offset()).append('\t').append(r.timestamp()).append('\t')
              .append(r.timestampType().id).append('\t').append(hex(r.key())).append('\t')
              .append(hex(r.value())).append('\t').append(h).append('\n');
        }
      }
      System.out.print(out);
      System.out.println("END " + end);
    }
  }

  public static void main(String[] args) throws Exception {
    if (args[0].equals("produce")) produce(args[1], args[2]);
    else consume(args[1], args[2], args[3]);
  }
}
