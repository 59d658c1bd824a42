package dev.sparkext.windows;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.IOException;
import java.io.Serializable;
import java.util.ArrayList;
import java.util.Base64;
import java.util.List;
import org.apache.spark.api.java.function.MapPartitionsFunction;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Encoders;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructType;

/**
 * Stage 1 of spark-ext's windows in the JVM: each input partition's events folded into
 * partial states per (keys, bucket, frame) or per partial session, sent as the wire rows
 * Python's stage 2 reads (one Arrow IPC blob of partials per bucket, plus, in streaming,
 * each source partition's latest event time for every bucket).
 *
 * <p>Python prepares the input (keys, the bucket, temporal columns as integers) and the
 * spec; what the spec means is documented in {@code spark_ext/windows/native.py}.
 */
public final class FrameFold {
  /** The wire rows' schema (state.py's WIRE). */
  public static final StructType WIRE = new StructType()
      .add("__bucket", DataTypes.LongType).add("__kind", DataTypes.LongType)
      .add("__part", DataTypes.LongType).add("__maxts", DataTypes.LongType)
      .add("__payload", DataTypes.BinaryType);

  private FrameFold() {}

  /** This jar's version (its manifest's), which must be the Python package's. */
  public static String version() {
    String v = FrameFold.class.getPackage().getImplementationVersion();
    return v == null ? "unknown" : v;
  }

  /** The wire rows of {@code events}, folded as {@code specJson} says. */
  public static Dataset<Row> fold(Dataset<Row> events, String specJson) {
    Spec spec = Spec.parse(specJson, events.schema());
    Layout layout = new Layout(spec, events.schema());
    MapPartitionsFunction<Row, Row> run = rows -> {
      try (Blobs blobs = new Blobs(spec.schema())) {
        return new Fold(spec, layout).run(rows, blobs);
      }
    };
    return events.mapPartitions(run, Encoders.row(WIRE));
  }

  /** Which column a state reads and how it folds. */
  enum Fn { COUNT, SUM, MIN, MAX }

  /** One state column of a count / sum / min / max aggregate. */
  record Column(String name, Fn fn, int input, boolean asFloat) implements Serializable {}

  /** Co-moments over one column or a pair: n, shift(s), mean(s), m2 (and cxy). */
  record Moments(String prefix, int[] inputs) implements Serializable {}

  /** Everything a task needs; serialised into the closure. */
  record Spec(boolean sliding, long slideUs, long gapUs, int buckets, boolean streaming, int[] keys,
              int ts, int bucket, int part, byte[] schema, List<Column> columns, List<Moments> moments)
      implements Serializable {

    static Spec parse(String json, StructType input) {
      JsonNode j;
      try {
        j = new ObjectMapper().readTree(json);
      } catch (IOException e) {
        throw new IllegalArgumentException("spark-ext frame fold: unreadable spec: " + e.getMessage(), e);
      }
      List<Column> columns = new ArrayList<>();
      List<Moments> moments = new ArrayList<>();
      for (JsonNode op : j.get("ops")) {
        String prefix = op.get("prefix").asText();
        if (op.get("kind").asText().equals("moments")) {
          moments.add(new Moments(prefix, indices(op.get("inputs"), input)));
          continue;
        }
        for (JsonNode c : op.get("columns")) {
          JsonNode in = c.get("input");
          int idx = in == null || in.isNull() ? -1 : input.fieldIndex(in.asText());
          columns.add(new Column(prefix + "__" + c.get("state").asText(),
              Fn.valueOf(c.get("fn").asText().toUpperCase()), idx, c.get("float").asBoolean()));
        }
      }
      JsonNode part = j.get("part");
      return new Spec(j.get("kind").asText().equals("sliding"), j.get("slide_us").asLong(),
          j.get("gap_us").asLong(), j.get("buckets").asInt(), j.get("streaming").asBoolean(),
          indices(j.get("keys"), input), input.fieldIndex(j.get("ts").asText()),
          input.fieldIndex(j.get("bucket").asText()),
          part == null || part.isNull() ? -1 : input.fieldIndex(part.asText()),
          Base64.getDecoder().decode(j.get("schema").asText()), columns, moments);
    }

    private static int[] indices(JsonNode names, StructType input) {
      int[] out = new int[names.size()];
      for (int i = 0; i < out.length; i++) {
        out[i] = input.fieldIndex(names.get(i).asText());
      }
      return out;
    }
  }
}
