package dev.sparkext.windows;

import dev.sparkext.windows.FrameFold.Column;
import dev.sparkext.windows.FrameFold.Fn;
import dev.sparkext.windows.FrameFold.Moments;
import dev.sparkext.windows.FrameFold.Spec;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;

/**
 * One task's fold: events into groups (a partial frame or session each) holding their
 * states in long and double slots, in the order Python's fold adds them (row order), so
 * integer states and float sums come out bit for bit the same.
 */
final class Fold {
  static final long MIN = -(1L << 62); // clock.py's MIN: "no event time"

  /** A partial: its keys (values of its first row), bucket, bounds and state slots. */
  static final class Group {
    Object[] keys; // a session's: its earliest event's
    final long bucket;
    long lo; // the frame, or the session's start
    long hi; // the session's end
    final long[] l;
    final double[] d;

    Group(Object[] keys, long bucket, long lo, Layout layout) {
      this.keys = keys;
      this.bucket = bucket;
      this.lo = lo;
      this.l = layout.initL.clone();
      this.d = layout.initD.clone();
    }
  }

  /**
   * Map key: the keys (floats normalised as Python groups them), bucket and frame. One
   * instance is refilled for every row's lookup and copied only for a new group, so a row
   * that joins a group allocates nothing here.
   */
  private static final class Key {
    final Object[] v;
    long bucket;
    long frame;
    int hash;

    Key(Object[] v) {
      this.v = v;
    }

    Key at(long bucket, long frame) {
      this.bucket = bucket;
      this.frame = frame;
      this.hash = (Arrays.hashCode(v) * 31 + Long.hashCode(bucket)) * 31 + Long.hashCode(frame);
      return this;
    }

    Key copy() {
      return new Key(v.clone()).at(bucket, frame);
    }

    @Override
    public int hashCode() {
      return hash;
    }

    @Override
    public boolean equals(Object o) {
      return o instanceof Key k && k.frame == frame && k.bucket == bucket && Arrays.equals(k.v, v);
    }
  }

  private final Spec spec;
  private final Layout layout;
  private final Fn[] colFn;
  private final int[] colIn;
  private final Map<Long, Long> seen = new TreeMap<>(); // source partition -> latest event time
  // The partition of the rows just read and their latest time, merged into seen when the
  // partition changes: a source partition's rows come together, so most rows touch no map.
  private boolean seeing;
  private long seenPart;
  private long seenMax;
  // No state depends on the order values are added in (float sums and co-moments do, to the
  // last bit): sessions can be built as rows come and merged from their states.
  private final boolean mergeable;

  Fold(Spec spec, Layout layout) {
    this.spec = spec;
    this.layout = layout;
    List<Column> cols = spec.columns();
    colFn = new Fn[cols.size()];
    colIn = new int[cols.size()];
    for (int i = 0; i < cols.size(); i++) {
      colFn[i] = cols.get(i).fn();
      colIn[i] = cols.get(i).input();
    }
    boolean orderFree = spec.moments().isEmpty();
    for (int i = 0; i < colFn.length; i++) {
      orderFree &= !(colFn[i] == Fn.SUM && layout.colDouble[i]);
    }
    mergeable = orderFree;
  }

  /** The wire rows of one partition's events. */
  Iterator<Row> run(Iterator<Row> rows, Blobs blobs) {
    List<Group> groups = spec.sliding() ? frames(rows) : mergeable ? streamedSessions(rows) : sessions(rows);
    flushSeen();
    Map<Long, List<Group>> byBucket = new TreeMap<>();
    for (Group g : groups) {
      finish(g);
      byBucket.computeIfAbsent(g.bucket, b -> new ArrayList<>()).add(g);
    }
    List<Row> out = new ArrayList<>();
    for (Map.Entry<Long, List<Group>> e : byBucket.entrySet()) {
      out.add(RowFactory.create(e.getKey(), 0L, -1L, MIN, blobs.write(e.getValue(), spec, layout)));
    }
    if (spec.streaming()) {
      for (long b = 0; b < spec.buckets(); b++) {
        for (Map.Entry<Long, Long> p : seen.entrySet()) {
          out.add(RowFactory.create(b, 1L, p.getKey(), p.getValue(), new byte[0]));
        }
      }
    }
    return out.iterator();
  }

  private List<Group> frames(Iterator<Row> rows) {
    Map<Key, Group> groups = new HashMap<>(1 << 12);
    List<Group> order = new ArrayList<>(); // first-seen order, as Python's fold emits them
    Key probe = new Key(new Object[spec.keys().length]);
    int tsAt = spec.ts();
    int bucketAt = spec.bucket();
    long slide = spec.slideUs();
    while (rows.hasNext()) {
      Row r = rows.next();
      if (r.isNullAt(tsAt)) {
        continue;
      }
      long ts = r.getLong(tsAt);
      see(r, ts);
      long bucket = r.getLong(bucketAt);
      long frame = Math.floorDiv(ts, slide);
      fillKey(r, probe.v);
      Group g = groups.get(probe.at(bucket, frame));
      if (g == null) {
        g = new Group(keyOf(r), bucket, frame, layout);
        groups.put(probe.copy(), g);
        order.add(g);
      }
      add(g, r);
    }
    return order;
  }

  /** One key's events in arrival order (row order within the key). */
  private static final class Events {
    Row[] rows = new Row[8];
    long[] ts = new long[8];
    int n;
    boolean sorted = true;

    void add(Row r, long t) {
      if (n == rows.length) {
        rows = Arrays.copyOf(rows, 2 * n);
        ts = Arrays.copyOf(ts, 2 * n);
      }
      sorted &= n == 0 || ts[n - 1] <= t;
      rows[n] = r;
      ts[n++] = t;
    }

    /** Positions in time order; ties keep arrival order (Python's stable sort). */
    int[] order() {
      if (sorted) {
        return java.util.stream.IntStream.range(0, n).toArray();
      }
      return java.util.stream.IntStream.range(0, n).boxed()
          .sorted((a, b) -> Long.compare(ts[a], ts[b])).mapToInt(Integer::intValue).toArray();
    }
  }

  private List<Group> sessions(Iterator<Row> rows) {
    Map<Key, Events> byKey = new LinkedHashMap<>(1 << 12);
    Key probe = new Key(new Object[spec.keys().length]);
    while (rows.hasNext()) {
      Row r = rows.next();
      if (r.isNullAt(spec.ts())) {
        continue;
      }
      long ts = r.getLong(spec.ts());
      see(r, ts);
      fillKey(r, probe.v);
      Events e = byKey.get(probe.at(r.getLong(spec.bucket()), 0));
      if (e == null) {
        e = new Events();
        byKey.put(probe.copy(), e);
      }
      e.add(r, ts);
    }
    List<Group> sessions = new ArrayList<>();
    for (Events e : byKey.values()) {
      Group[] sessionOf = new Group[e.n];
      Group s = null;
      long last = 0;
      for (int i : e.order()) {
        long t = e.ts[i];
        if (s == null || t - last > spec.gapUs()) {
          s = new Group(keyOf(e.rows[i]), e.rows[i].getLong(spec.bucket()), t, layout);
          sessions.add(s);
        }
        s.hi = t + spec.gapUs();
        last = t;
        sessionOf[i] = s;
      }
      for (int i = 0; i < e.n; i++) { // arrival order, as Python accumulates
        add(sessionOf[i], e.rows[i]);
      }
    }
    return sessions;
  }

  /** One key's sessions by start, and the latest (most rows come after it, in time order). */
  private static final class KeySessions {
    final TreeMap<Long, Group> byLo = new TreeMap<>();
    Group latest;
  }

  /**
   * Sessions built as rows come, keeping no row: the result of {@link #sessions} when adding
   * in any order gives the same states. An event joins the session it falls within
   * {@code gap} of, starts one, or bridges two, which then merge.
   */
  private List<Group> streamedSessions(Iterator<Row> rows) {
    Map<Key, KeySessions> byKey = new LinkedHashMap<>(1 << 12);
    Key probe = new Key(new Object[spec.keys().length]);
    int tsAt = spec.ts();
    int bucketAt = spec.bucket();
    while (rows.hasNext()) {
      Row r = rows.next();
      if (r.isNullAt(tsAt)) {
        continue;
      }
      long ts = r.getLong(tsAt);
      see(r, ts);
      long bucket = r.getLong(bucketAt);
      fillKey(r, probe.v);
      KeySessions k = byKey.get(probe.at(bucket, 0));
      if (k == null) {
        k = new KeySessions();
        byKey.put(probe.copy(), k);
      }
      add(sessionOf(k, r, bucket, ts), r);
    }
    List<Group> out = new ArrayList<>();
    for (KeySessions k : byKey.values()) {
      out.addAll(k.byLo.values());
    }
    return out;
  }

  private Group sessionOf(KeySessions k, Row r, long bucket, long ts) {
    long gap = spec.gapUs();
    Group latest = k.latest;
    if (latest != null && ts >= latest.lo) { // in time order: the latest session or a new one
      if (ts <= latest.hi) {
        latest.hi = Math.max(latest.hi, ts + gap);
        return latest;
      }
    } else if (latest != null) {
      Map.Entry<Long, Group> p = k.byLo.floorEntry(ts);
      Group prev = p == null ? null : p.getValue();
      Group next = k.byLo.higherEntry(ts).getValue(); // latest.lo > ts: there is one
      boolean joinsPrev = prev != null && ts <= prev.hi;
      boolean joinsNext = next.lo - ts <= gap;
      if (joinsPrev) {
        prev.hi = Math.max(prev.hi, ts + gap);
        if (joinsNext) {
          k.byLo.remove(next.lo);
          merge(prev, next);
          if (k.latest == next) {
            k.latest = prev;
          }
        }
        return prev;
      }
      if (joinsNext) { // the session's earliest event now: its start and keys
        k.byLo.remove(next.lo);
        next.lo = ts;
        next.keys = keyOf(r);
        k.byLo.put(ts, next);
        return next;
      }
    }
    Group g = new Group(keyOf(r), bucket, ts, layout);
    g.hi = ts + gap;
    k.byLo.put(ts, g);
    if (latest == null || ts > latest.lo) {
      k.latest = g;
    }
    return g;
  }

  /** {@code from}'s states into {@code into}'s (count, integer sum, min, max only). */
  private void merge(Group into, Group from) {
    into.hi = Math.max(into.hi, from.hi);
    for (int i = 0; i < colFn.length; i++) {
      int s = layout.colSlot[i];
      if (layout.colDouble[i]) {
        into.d[s] = combine(colFn[i], into.d[s], from.d[s]);
      } else {
        into.l[s] = combine(colFn[i], into.l[s], from.l[s]);
      }
    }
  }

  /** An integer state with one more value, or two states merged (a count adds counts). */
  private static long combine(Fn fn, long a, long b) {
    return switch (fn) {
      case COUNT, SUM -> a + b; // wraps, as NumPy's int64
      case MIN -> Math.min(a, b);
      case MAX -> Math.max(a, b);
    };
  }

  /** A float state with one more value, or two states merged. */
  private static double combine(Fn fn, double a, double b) {
    return switch (fn) {
      case COUNT, SUM -> a + b;
      case MIN -> Double.isNaN(a) ? b : Double.isNaN(b) ? a : Math.min(a, b);
      case MAX -> Math.max(a, b); // NaN wins, as NumPy's maximum
    };
  }

  private void see(Row r, long ts) {
    int p = spec.part();
    if (!spec.streaming() || p >= 0 && r.isNullAt(p)) {
      return;
    }
    long part = p < 0 ? 0L : ((Number) r.get(p)).longValue();
    if (seeing && part == seenPart) {
      seenMax = Math.max(seenMax, ts);
      return;
    }
    flushSeen();
    seeing = true;
    seenPart = part;
    seenMax = ts;
  }

  private void flushSeen() {
    if (seeing) {
      seen.merge(seenPart, seenMax, Math::max);
      seeing = false;
    }
  }

  /** The row's keys as they are: a group keeps its first row's (as Python's fold does). */
  private Object[] keyOf(Row r) {
    int[] keys = spec.keys();
    Object[] v = new Object[keys.length];
    for (int i = 0; i < keys.length; i++) {
      v[i] = r.get(keys[i]);
    }
    return v;
  }

  /** The row's keys into {@code v}, floats normalised: -0.0 and 0.0 are one group. */
  private void fillKey(Row r, Object[] v) {
    int[] keys = spec.keys();
    for (int i = 0; i < keys.length; i++) {
      Object o = r.get(keys[i]);
      if (o instanceof Double x) {
        o = x + 0.0;
      } else if (o instanceof Float x) {
        o = x + 0.0f;
      }
      v[i] = o;
    }
  }

  private void add(Group g, Row r) {
    for (int i = 0; i < colFn.length; i++) {
      Fn fn = colFn[i];
      int in = colIn[i];
      if (in >= 0 && r.isNullAt(in)) {
        continue;
      }
      int s = layout.colSlot[i];
      if (fn == Fn.COUNT) {
        g.l[s]++;
      } else if (layout.colDouble[i]) {
        g.d[s] = combine(fn, g.d[s], ((Number) r.get(in)).doubleValue());
      } else {
        g.l[s] = combine(fn, g.l[s], ((Number) r.get(in)).longValue());
      }
    }
    List<Moments> ms = spec.moments();
    for (int m = 0; m < ms.size(); m++) {
      int[] in = ms.get(m).inputs();
      if (r.isNullAt(in[0]) || in.length == 2 && r.isNullAt(in[1])) {
        continue;
      }
      double[] d = g.d;
      int b = layout.momD[m];
      long n = ++g.l[layout.momN[m]];
      double x = ((Number) r.get(in[0])).doubleValue();
      if (n == 1) {
        d[b] = x;
      }
      // Welford around the first value; finish() re-bases onto the last, Python's shift.
      double dx = x - d[b];
      double delta = dx - d[b + 1];
      d[b + 1] += delta / n;
      d[b + 2] = x;
      if (in.length == 1) {
        d[b + 3] += delta * (dx - d[b + 1]);
        continue;
      }
      double y = ((Number) r.get(in[1])).doubleValue();
      if (n == 1) {
        d[b + 3] = y;
      }
      double dy = y - d[b + 3];
      d[b + 4] += (dy - d[b + 4]) / n;
      d[b + 5] = y;
      d[b + 6] += delta * (dx - d[b + 1]);
      d[b + 7] += delta * (dy - d[b + 4]);
    }
  }

  /** Means re-based from the first value onto the last (the shift Python keeps). */
  private void finish(Group g) {
    for (int m = 0; m < spec.moments().size(); m++) {
      int b = layout.momD[m];
      g.d[b + 1] += g.d[b] - g.d[b + 2];
      if (spec.moments().get(m).inputs().length == 2) {
        g.d[b + 4] += g.d[b + 3] - g.d[b + 5];
      }
    }
  }
}
