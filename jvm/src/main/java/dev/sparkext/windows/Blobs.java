package dev.sparkext.windows;

import dev.sparkext.windows.FrameFold.Spec;
import dev.sparkext.windows.Fold.Group;
import java.io.ByteArrayInputStream;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.channels.Channels;
import java.nio.charset.StandardCharsets;
import java.util.List;
import org.apache.arrow.memory.BufferAllocator;
import org.apache.arrow.memory.RootAllocator;
import org.apache.arrow.vector.BaseIntVector;
import org.apache.arrow.vector.BitVector;
import org.apache.arrow.vector.DateDayVector;
import org.apache.arrow.vector.FieldVector;
import org.apache.arrow.vector.Float4Vector;
import org.apache.arrow.vector.Float8Vector;
import org.apache.arrow.vector.TimeStampVector;
import org.apache.arrow.vector.VarCharVector;
import org.apache.arrow.vector.VectorSchemaRoot;
import org.apache.arrow.vector.ipc.ArrowStreamReader;
import org.apache.arrow.vector.ipc.ArrowStreamWriter;
import org.apache.arrow.vector.types.pojo.Schema;

/** One bucket's partials as an Arrow IPC stream in the partials' schema Python declared. */
final class Blobs implements AutoCloseable {
  private final BufferAllocator allocator = new RootAllocator();
  private final Schema schema;

  /** {@code emptyStream}: an IPC stream of no rows, carrying the schema. */
  Blobs(byte[] emptyStream) {
    try (ArrowStreamReader r = new ArrowStreamReader(new ByteArrayInputStream(emptyStream), allocator)) {
      schema = r.getVectorSchemaRoot().getSchema();
    } catch (IOException e) {
      throw new UncheckedIOException("spark-ext frame fold: unreadable partials schema", e);
    }
  }

  byte[] write(List<Group> groups, Spec spec, Layout layout) {
    int nkeys = spec.keys().length;
    try (VectorSchemaRoot root = VectorSchemaRoot.create(schema, allocator)) {
      root.allocateNew();
      List<FieldVector> vectors = root.getFieldVectors();
      for (int f = 0; f < vectors.size(); f++) {
        FieldVector v = vectors.get(f);
        String name = v.getName();
        int[] slot = layout.fields.get(name);
        for (int i = 0; i < groups.size(); i++) {
          Group g = groups.get(i);
          if (f < nkeys) { // the keys come first, in the spec's order
            putObject(v, i, g.keys[f]);
          } else if (name.equals("__bucket")) {
            putLong(v, i, g.bucket);
          } else if (name.equals("frame") || name.equals("session_start")) {
            putLong(v, i, g.lo);
          } else if (name.equals("session_end")) {
            putLong(v, i, g.hi);
          } else if (slot == null) {
            throw new IllegalStateException("spark-ext frame fold: no state for partials column " + name);
          } else if (slot[0] == 0) {
            putLong(v, i, g.l[slot[1]]);
          } else {
            putDouble(v, i, g.d[slot[1]]);
          }
        }
        v.setValueCount(groups.size());
      }
      root.setRowCount(groups.size());
      ByteArrayOutputStream out = new ByteArrayOutputStream();
      try (ArrowStreamWriter w = new ArrowStreamWriter(root, null, Channels.newChannel(out))) {
        w.start();
        w.writeBatch();
        w.end();
      }
      return out.toByteArray();
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
  }

  private static void putLong(FieldVector v, int i, long x) {
    if (v instanceof BaseIntVector b) { // int8 .. int64, the width Python declared
      b.setWithPossibleTruncate(i, x);
    } else if (v instanceof TimeStampVector t) {
      t.setSafe(i, x);
    } else if (v instanceof DateDayVector d) {
      d.setSafe(i, (int) x);
    } else {
      throw new IllegalStateException("spark-ext frame fold: integer into " + v.getField());
    }
  }

  private static void putDouble(FieldVector v, int i, double x) {
    if (v instanceof Float8Vector f) {
      f.setSafe(i, x);
    } else if (v instanceof Float4Vector f) {
      f.setSafe(i, (float) x);
    } else {
      throw new IllegalStateException("spark-ext frame fold: float into " + v.getField());
    }
  }

  private static void putObject(FieldVector v, int i, Object o) {
    if (o == null) {
      v.setNull(i);
    } else if (v instanceof VarCharVector s) {
      s.setSafe(i, o.toString().getBytes(StandardCharsets.UTF_8));
    } else if (v instanceof BitVector b) {
      b.setSafe(i, (Boolean) o ? 1 : 0);
    } else if (o instanceof Double || o instanceof Float) {
      putDouble(v, i, ((Number) o).doubleValue());
    } else {
      putLong(v, i, ((Number) o).longValue());
    }
  }

  @Override
  public void close() {
    allocator.close();
  }
}
