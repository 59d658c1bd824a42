package dev.sparkext.monitoring;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.sun.net.httpserver.HttpExchange;
import com.sun.net.httpserver.HttpServer;
import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStream;
import java.io.InputStreamReader;
import java.io.OutputStream;
import java.net.BindException;
import java.net.InetSocketAddress;
import java.nio.charset.StandardCharsets;
import java.nio.file.DirectoryStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.nio.file.attribute.PosixFilePermissions;
import java.time.Instant;
import java.util.ArrayList;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.Executors;
import org.apache.spark.SparkConf;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The metrics of a JVM's streaming queries at {@code http://addr:port/metrics}: the same names,
 * labels and values as the Python exporter ({@code spark_ext.monitoring.serve}), from the same
 * two inputs. Spark's query events come through {@link MetricsListener}; the sinks' own figures
 * come from the cards their commit workers (Python processes on this host) write to the spool
 * directory, which this creates so that they start writing. The declarations (names, kinds,
 * labels, help) are the Python package's, copied into this jar's resources as {@code
 * metrics.tsv}; a test holds the copy equal.
 *
 * <p>One per JVM: the first listener starts it, later sessions' listeners join it. Its HTTP
 * threads are daemons, so it never keeps a finished application's JVM alive.
 */
public final class Exporter {
  static final String CONF_PORT = "spark.sparkext.metrics.port";
  static final String CONF_ADDR = "spark.sparkext.metrics.addr";
  static final String CARDS_ENV = "SPARK_EXT_METRICS_DIR";
  static final String SOURCES = "sources";
  static final double SOURCE_CARD_AGE_S = 300.0; // a queue source renews its card every 5 s
  private static final Logger LOG = LoggerFactory.getLogger(Exporter.class);
  private static final ObjectMapper JSON = new ObjectMapper();
  private static Exporter running;

  /** One declared metric: a line of {@code metrics.tsv}. */
  record Metric(String name, String kind, List<String> labels, String help) {}

  /** What is known of one query, by its id (stable across restarts). */
  static final class QueryState {
    final String name;
    JsonNode progress;
    double seen = now();
    boolean active = true;
    boolean failed;

    QueryState(String name) {
      this.name = name == null ? "" : name;
    }
  }

  final Map<String, Metric> metrics;
  final int cardVersion;
  final Path cards;
  final String addr;
  private volatile int port;
  private final Map<String, QueryState> queries = new LinkedHashMap<>();

  private Exporter(String addr, int port, Path cards) throws IOException {
    Map<String, Metric> declared = new LinkedHashMap<>();
    int version = 1;
    try (InputStream in = Exporter.class.getResourceAsStream("metrics.tsv");
         BufferedReader r = new BufferedReader(new InputStreamReader(in, StandardCharsets.UTF_8))) {
      for (String line; (line = r.readLine()) != null; ) {
        String[] f = line.split("\t", 4);
        if (line.startsWith("#")) {
          version = Integer.parseInt(f[1].trim());
        } else if (f.length == 4) {
          List<String> labels = f[2].isEmpty() ? List.of() : List.of(f[2].split(","));
          declared.put(f[0], new Metric(f[0], f[1], labels, f[3]));
        }
      }
    }
    this.metrics = declared;
    this.cardVersion = version;
    this.cards = cards;
    this.addr = addr;
    this.port = port;
  }

  /**
   * The JVM's exporter, started on the first call from {@code spark.sparkext.metrics.port}
   * (0: any free port) and {@code spark.sparkext.metrics.addr} (default 127.0.0.1). Throws
   * {@link IllegalArgumentException} naming the setting when the port is missing or not a port,
   * or is taken: Spark then fails the session's first streaming query with that message.
   */
  public static synchronized Exporter forConf(SparkConf conf) {
    if (running != null) {
      return running;
    }
    String given = conf.get(CONF_PORT, "").trim();
    if (given.isEmpty()) {
      throw new IllegalArgumentException(
          "spark.sql.streaming.streamingQueryListeners names " + MetricsListener.class.getName()
              + " but " + CONF_PORT + " is not set: set it to the port to serve metrics on (0: any free"
              + " port), or drop the listener");
    }
    int port;
    try {
      port = Integer.parseInt(given);
    } catch (NumberFormatException e) {
      port = -1;
    }
    if (port < 0 || port > 65535) {
      throw new IllegalArgumentException(CONF_PORT + "=" + given + " is not a port: give 0-65535 (0: any"
          + " free port), or unset it and drop the listener to serve no metrics");
    }
    String addr = conf.get(CONF_ADDR, "127.0.0.1").trim();
    try {
      Exporter e = new Exporter(addr, port, cardsRoot());
      e.serve();
      running = e;
    } catch (BindException e) {
      throw new IllegalArgumentException("cannot serve metrics on " + addr + ":" + port + " (" + e.getMessage()
          + "): the port is taken or the address is not this host's; set another " + CONF_PORT
          + " (0: any free one) or " + CONF_ADDR + " (each job on a host needs a port of its own)", e);
    } catch (IOException e) {
      throw new IllegalArgumentException("cannot serve metrics on " + addr + ":" + port + ": " + e, e);
    }
    return running;
  }

  /** The exporter this JVM runs, or null: for a test, and for the port when 0 was asked. */
  public static synchronized Exporter running() {
    return running;
  }

  /** The port it serves on (the bound one when 0 was asked). */
  public int port() {
    return port;
  }

  private void serve() throws IOException {
    Files.createDirectories(cards);
    try {
      Files.setPosixFilePermissions(cards, PosixFilePermissions.fromString("rwx------"));
    } catch (IOException | UnsupportedOperationException e) {
      LOG.debug("cannot restrict {} to its owner: {}", cards, e.toString());
    }
    HttpServer server = HttpServer.create(new InetSocketAddress(addr, port), 0);
    server.createContext("/", this::answer);
    server.setExecutor(Executors.newSingleThreadExecutor(daemon("spark-ext-metrics")));
    // The dispatcher thread takes the daemon flag of the thread that starts it.
    Thread starter = daemon("spark-ext-metrics-start").newThread(server::start);
    starter.start();
    try {
      starter.join();
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    }
    port = server.getAddress().getPort();
    LOG.info("spark-ext metrics on http://{}:{}/metrics", addr, port);
  }

  private void answer(HttpExchange x) throws IOException {
    byte[] body;
    int code = 200;
    try {
      body = scrape().getBytes(StandardCharsets.UTF_8);
    } catch (RuntimeException e) {
      code = 500;
      body = ("error: " + e).getBytes(StandardCharsets.UTF_8);
    }
    x.getResponseHeaders().set("Content-Type", "text/plain; version=0.0.4; charset=utf-8");
    x.sendResponseHeaders(code, body.length);
    try (OutputStream out = x.getResponseBody()) {
      out.write(body);
    }
  }

  private static java.util.concurrent.ThreadFactory daemon(String name) {
    return r -> {
      Thread t = new Thread(r, name);
      t.setDaemon(true);
      return t;
    };
  }

  /** The spool directory the Python side's cards go to: its {@code cards.root()}. */
  static Path cardsRoot() {
    String given = System.getenv(CARDS_ENV);
    if (given != null && !given.isEmpty()) {
      return Paths.get(given);
    }
    return Paths.get(tempDir(), "spark-ext-metrics-" + uid());
  }

  /** Python's {@code tempfile.gettempdir()}: the first of $TMPDIR, $TEMP, $TMP, /tmp, /var/tmp,
   * /usr/tmp that is a writable directory. */
  static String tempDir() {
    List<String> candidates = new ArrayList<>();
    for (String env : new String[] {"TMPDIR", "TEMP", "TMP"}) {
      String v = System.getenv(env);
      if (v != null && !v.isEmpty()) {
        candidates.add(v);
      }
    }
    candidates.addAll(List.of("/tmp", "/var/tmp", "/usr/tmp"));
    for (String c : candidates) {
      Path p = Paths.get(c);
      if (Files.isDirectory(p) && Files.isWritable(p)) {
        return p.toAbsolutePath().normalize().toString();
      }
    }
    return System.getProperty("java.io.tmpdir");
  }

  private static long uid() {
    try {
      return ((Number) Files.getAttribute(Paths.get("/proc/self"), "unix:uid")).longValue();
    } catch (IOException | RuntimeException e) {
      return new com.sun.security.auth.module.UnixSystem().getUid();
    }
  }

  static double now() {
    return System.currentTimeMillis() / 1000.0;
  }

  // ---- events (Spark's listener bus thread): cheap, never throw ----

  void started(String id, String name) {
    synchronized (queries) {
      queries.put(id, new QueryState(name));
    }
  }

  void progress(String json) {
    try {
      JsonNode p = JSON.readTree(json);
      String id = p.path("id").asText();
      String name = p.path("name").isTextual() ? p.path("name").asText() : "";
      synchronized (queries) {
        QueryState s = queries.computeIfAbsent(id, k -> new QueryState(name));
        s.progress = p;
        s.seen = now();
        s.active = true;
      }
    } catch (IOException | RuntimeException e) {
      LOG.debug("a progress event not read: {}", e.toString());
    }
  }

  void idle(String id) {
    synchronized (queries) {
      QueryState s = queries.get(id);
      if (s != null) {
        s.seen = now();
      }
    }
  }

  void terminated(String id, boolean failed) {
    synchronized (queries) {
      QueryState s = queries.get(id);
      if (s != null) {
        s.active = false;
        s.failed = failed;
      }
    }
  }

  // ---- a scrape (the HTTP thread) ----

  /** The families, in declaration order, each with the samples one scrape found. */
  final class Families {
    final Map<String, List<String>> samples = new LinkedHashMap<>();

    Families() {
      for (String name : metrics.keySet()) {
        samples.put(name, new ArrayList<>());
      }
    }

    void add(String name, List<String> labelValues, double value) {
      Metric m = metrics.get(name);
      StringBuilder b = new StringBuilder(name);
      if (!m.labels().isEmpty()) {
        b.append('{');
        for (int i = 0; i < m.labels().size(); i++) {
          if (i > 0) {
            b.append(',');
          }
          b.append(m.labels().get(i)).append("=\"").append(escapeLabel(labelValues.get(i))).append('"');
        }
        b.append('}');
      }
      b.append(' ').append(number(value)).append('\n');
      samples.get(name).add(b.toString());
    }

    String text() {
      StringBuilder b = new StringBuilder();
      for (Metric m : metrics.values()) {
        b.append("# HELP ").append(m.name()).append(' ').append(escapeHelp(m.help())).append('\n');
        b.append("# TYPE ").append(m.name()).append(' ').append(m.kind()).append('\n');
        for (String s : samples.get(m.name())) {
          b.append(s);
        }
      }
      return b.toString();
    }
  }

  String scrape() {
    Families fam = new Families();
    double now = now();
    List<Object[]> seen = new ArrayList<>();
    synchronized (queries) {
      for (Map.Entry<String, QueryState> e : queries.entrySet()) {
        QueryState s = e.getValue();
        seen.add(new Object[] {e.getKey(), s.name, s.progress, s.seen, s.active, s.failed});
      }
    }
    for (Object[] q : seen) {
      List<String> labels = List.of((String) q[1], (String) q[0]);
      fam.add("spark_ext_query_active", labels, (Boolean) q[4] ? 1 : 0);
      fam.add("spark_ext_query_failed", labels, (Boolean) q[5] ? 1 : 0);
      fam.add("spark_ext_query_seconds_since_progress", labels, now - (Double) q[3]);
      if (q[2] != null) {
        progress(fam, labels, (JsonNode) q[2]);
      }
      for (JsonNode card : cards((String) q[0])) {
        card(fam, labels, card, now);
      }
    }
    for (JsonNode card : cards(SOURCES)) {
      if (now - card.path("at").asDouble(0) > SOURCE_CARD_AGE_S) {
        continue;
      }
      List<String> labels = List.of(card.path("broker").asText(""), card.path("queue").asText(""));
      for (String key : new String[] {"in_flight", "depth"}) {
        if (card.path(key).isNumber()) {
          fam.add("spark_ext_queue_" + key, labels, card.path(key).asDouble());
        }
      }
    }
    return fam.text();
  }

  private static void progress(Families fam, List<String> q, JsonNode p) {
    fam.add("spark_ext_query_batch_id", q, p.path("batchId").asDouble(0));
    fam.add("spark_ext_query_input_rows", q, p.path("numInputRows").asDouble(0));
    String[][] rates = {{"inputRowsPerSecond", "spark_ext_query_input_rows_per_second"},
        {"processedRowsPerSecond", "spark_ext_query_processed_rows_per_second"}};
    for (String[] r : rates) {
      JsonNode v = p.path(r[0]);
      if (v.isNumber() && !Double.isNaN(v.asDouble())) {
        fam.add(r[1], q, v.asDouble());
      }
    }
    Iterator<Map.Entry<String, JsonNode>> phases = p.path("durationMs").fields();
    while (phases.hasNext()) {
      Map.Entry<String, JsonNode> e = phases.next();
      fam.add("spark_ext_query_duration_ms", with(q, e.getKey()), e.getValue().asDouble());
    }
    JsonNode watermark = p.path("eventTime").path("watermark");
    if (watermark.isTextual() && !watermark.asText().isEmpty()) {
      Instant at = Instant.parse(watermark.asText());
      fam.add("spark_ext_query_watermark_seconds", q, at.getEpochSecond() + at.getNano() / 1e9);
    }
    double state = 0;
    double late = 0;
    for (JsonNode op : p.path("stateOperators")) {
      state += op.path("numRowsTotal").asDouble(0);
      late += op.path("numRowsDroppedByWatermark").asDouble(0);
    }
    fam.add("spark_ext_query_state_rows", q, state);
    fam.add("spark_ext_query_late_rows", q, late);
    int i = 0;
    for (JsonNode source : p.path("sources")) {
      Map<List<String>, Long> lags = lags(source.path("endOffset"), source.path("latestOffset"));
      List<String> s = with(q, String.valueOf(i));
      long max = -1;
      for (Map.Entry<List<String>, Long> e : lags.entrySet()) {
        List<String> labels = new ArrayList<>(s);
        labels.addAll(e.getKey());
        fam.add("spark_ext_source_lag_records", labels, e.getValue());
        max = Math.max(max, e.getValue());
      }
      if (max >= 0) {
        fam.add("spark_ext_source_lag_records_max", s, max);
      }
      i++;
    }
  }

  /** Per [topic, partition]: latest minus end, for a Kafka source's offsets ({topic: {p: n}}). */
  static Map<List<String>, Long> lags(JsonNode end, JsonNode latest) {
    Map<List<String>, Long> e = kafkaOffsets(parsed(end));
    Map<List<String>, Long> l = kafkaOffsets(parsed(latest));
    Map<List<String>, Long> out = new TreeMap<>((a, b) -> {
      int c = a.get(0).compareTo(b.get(0));
      return c != 0 ? c : a.get(1).compareTo(b.get(1));
    });
    if (e == null || l == null) {
      return out;
    }
    for (Map.Entry<List<String>, Long> x : l.entrySet()) {
      Long at = e.get(x.getKey());
      if (at != null) {
        out.put(x.getKey(), Math.max(x.getValue() - at, 0));
      }
    }
    return out;
  }

  /** A progress's offsets: JSON text for some sources, an object already for others. */
  private static JsonNode parsed(JsonNode v) {
    if (v.isTextual()) {
      try {
        return JSON.readTree(v.asText());
      } catch (IOException e) {
        return null;
      }
    }
    return v;
  }

  /** {@code {"topic": {"0": 42}}} as [topic, partition] -> offset; null for any other shape. */
  private static Map<List<String>, Long> kafkaOffsets(JsonNode doc) {
    if (doc == null || !doc.isObject() || doc.isEmpty()) {
      return null;
    }
    Map<List<String>, Long> out = new LinkedHashMap<>();
    Iterator<Map.Entry<String, JsonNode>> topics = doc.fields();
    while (topics.hasNext()) {
      Map.Entry<String, JsonNode> t = topics.next();
      if (!t.getValue().isObject()) {
        return null;
      }
      Iterator<Map.Entry<String, JsonNode>> parts = t.getValue().fields();
      while (parts.hasNext()) {
        Map.Entry<String, JsonNode> p = parts.next();
        if (!p.getKey().matches("\\d+") || !p.getValue().isIntegralNumber()) {
          return null;
        }
        out.put(List.of(t.getKey(), String.valueOf(Integer.parseInt(p.getKey()))), p.getValue().asLong());
      }
    }
    return out;
  }

  private static void card(Families fam, List<String> q, JsonNode card, double now) {
    List<String> s = with(q, card.path("sink").asText(""));
    fam.add("spark_ext_sink_last_batch", s, card.path("batch").asDouble(-1));
    for (String key : new String[] {"rows", "retries", "recovered"}) {
      fam.add("spark_ext_sink_" + key + "_total", s, card.path(key + "_total").asDouble(0));
    }
    double rolledBack = card.path("rolled_back_total").asDouble(0);
    fam.add("spark_ext_sink_takeover_transactions_total", with(s, "committed"),
        card.path("recovered_total").asDouble(0) - rolledBack);
    fam.add("spark_ext_sink_takeover_transactions_total", with(s, "rolled_back"), rolledBack);
    for (String key : new String[] {"transactions", "decide_ms", "commit_ms", "batch_ms", "epoch"}) {
      if (card.path(key).isNumber()) {
        fam.add("spark_ext_sink_" + key, s, card.path(key).asDouble());
      }
    }
    if (card.path("dead_letters").isNumber()) {
      fam.add("spark_ext_sink_dead_letters", s, card.path("dead_letters").asDouble());
    }
    if (card.path("at").isNumber()) {
      fam.add("spark_ext_sink_seconds_since_commit", s, now - card.path("at").asDouble());
    }
  }

  /** The cards in the spool's directory {@code under} (a query id, or the sources'), by file name;
   * a card a newer release wrote, or one replaced while read, is left out. */
  List<JsonNode> cards(String under) {
    List<JsonNode> out = new ArrayList<>();
    Path dir = cards.resolve(under);
    if (!Files.isDirectory(dir)) {
      return out;
    }
    List<Path> paths = new ArrayList<>();
    try (DirectoryStream<Path> ds = Files.newDirectoryStream(dir, "*.json")) {
      ds.forEach(paths::add);
    } catch (IOException e) {
      return out;
    }
    paths.sort(null);
    for (Path p : paths) {
      try {
        JsonNode card = JSON.readTree(Files.readAllBytes(p));
        if (card.isObject() && card.path("v").asInt(1) <= cardVersion) {
          out.add(card);
        }
      } catch (IOException | RuntimeException e) {
        // replaced while read: the next scrape has it
      }
    }
    return out;
  }

  private static List<String> with(List<String> labels, String more) {
    List<String> out = new ArrayList<>(labels);
    out.add(more);
    return out;
  }

  static String number(double v) {
    if (Double.isNaN(v)) {
      return "NaN";
    }
    if (Double.isInfinite(v)) {
      return v > 0 ? "+Inf" : "-Inf";
    }
    if (v == Math.rint(v) && Math.abs(v) < 1e15) {
      return (long) v + ".0";
    }
    return Double.toString(v);
  }

  private static String escapeLabel(String v) {
    return v.replace("\\", "\\\\").replace("\n", "\\n").replace("\"", "\\\"");
  }

  private static String escapeHelp(String v) {
    return v.replace("\\", "\\\\").replace("\n", "\\n");
  }
}
