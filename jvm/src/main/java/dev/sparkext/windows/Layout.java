package dev.sparkext.windows;

import dev.sparkext.windows.FrameFold.Column;
import dev.sparkext.windows.FrameFold.Fn;
import dev.sparkext.windows.FrameFold.Moments;
import dev.sparkext.windows.FrameFold.Spec;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.apache.spark.sql.types.ByteType;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.DoubleType;
import org.apache.spark.sql.types.FloatType;
import org.apache.spark.sql.types.IntegerType;
import org.apache.spark.sql.types.ShortType;
import org.apache.spark.sql.types.StructType;

/** Where each state lives: per count/sum/min/max column one slot, per co-moment a few. */
final class Layout implements java.io.Serializable {
  final Map<String, int[]> fields = new HashMap<>(); // state column -> {0: long / 1: double, slot}
  final int[] colSlot;
  final boolean[] colDouble;
  final int[] momN; // per Moments: its n slot (long) and first double slot
  final int[] momD;
  final long[] initL;
  final double[] initD;

  Layout(Spec spec, StructType input) {
    List<Long> l = new ArrayList<>();
    List<Double> d = new ArrayList<>();
    List<Column> cols = spec.columns();
    colSlot = new int[cols.size()];
    colDouble = new boolean[cols.size()];
    for (int i = 0; i < cols.size(); i++) {
      Column c = cols.get(i);
      DataType t = c.input() < 0 ? DataTypes.NullType : input.fields()[c.input()].dataType();
      boolean floating = t instanceof FloatType || t instanceof DoubleType;
      boolean dbl = c.fn() != Fn.COUNT && (floating || c.fn() == Fn.SUM && c.asFloat());
      colDouble[i] = dbl;
      colSlot[i] = dbl ? d.size() : l.size();
      if (dbl) {
        d.add(c.fn() == Fn.MIN ? Double.NaN : c.fn() == Fn.MAX ? Double.NEGATIVE_INFINITY : 0.0);
      } else {
        // NumPy's identities of the input's integer type (dates arrive as int, times as long)
        long top = t instanceof ByteType ? Byte.MAX_VALUE : t instanceof ShortType ? Short.MAX_VALUE
            : t instanceof IntegerType ? Integer.MAX_VALUE : Long.MAX_VALUE;
        l.add(c.fn() == Fn.MIN ? top : c.fn() == Fn.MAX ? -top - 1 : 0L);
      }
      fields.put(c.name(), new int[] {dbl ? 1 : 0, colSlot[i]});
    }
    List<Moments> ms = spec.moments();
    momN = new int[ms.size()];
    momD = new int[ms.size()];
    for (int m = 0; m < ms.size(); m++) {
      String p = ms.get(m).prefix() + "__";
      momN[m] = l.size();
      l.add(0L);
      momD[m] = d.size();
      boolean pair = ms.get(m).inputs().length == 2;
      // doubles: first, mean, last per axis, then m2 and (pair) cxy
      for (int k = 0; k < (pair ? 8 : 4); k++) {
        d.add(0.0);
      }
      int b = momD[m];
      fields.put(p + "n", new int[] {0, momN[m]});
      if (pair) {
        fields.put(p + "shift_x", new int[] {1, b + 2});
        fields.put(p + "mean_x", new int[] {1, b + 1});
        fields.put(p + "shift_y", new int[] {1, b + 5});
        fields.put(p + "mean_y", new int[] {1, b + 4});
        fields.put(p + "m2x", new int[] {1, b + 6});
        fields.put(p + "cxy", new int[] {1, b + 7});
      } else {
        fields.put(p + "shift", new int[] {1, b + 2});
        fields.put(p + "mean", new int[] {1, b + 1});
        fields.put(p + "m2", new int[] {1, b + 3});
      }
    }
    initL = l.stream().mapToLong(Long::longValue).toArray();
    initD = d.stream().mapToDouble(Double::doubleValue).toArray();
  }
}
