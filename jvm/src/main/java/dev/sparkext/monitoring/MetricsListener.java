package dev.sparkext.monitoring;

import org.apache.spark.SparkConf;
import org.apache.spark.sql.streaming.StreamingQueryListener;

/**
 * Turns the metrics exporter on from configuration alone, for a job that cannot be edited:
 *
 * <pre>
 * spark-submit --jars spark-ext-native_2.13-VERSION.jar \
 *   --conf spark.sql.streaming.streamingQueryListeners=dev.sparkext.monitoring.MetricsListener \
 *   --conf spark.sparkext.metrics.port=9108 job.py
 * </pre>
 *
 * <p>Spark makes one of these per session when the session's first streaming query manager is
 * made (on the driver; on a Spark Connect server, per client session), passing the
 * application's {@link SparkConf}. Every one feeds the JVM's single {@link Exporter}, so all
 * sessions' queries show on one port. Runs on Spark's listener bus thread: cheap, never throws.
 */
public final class MetricsListener extends StreamingQueryListener {
  private final Exporter exporter;

  /** Called by Spark: starts the exporter on the first call in this JVM (see {@link Exporter#forConf}). */
  public MetricsListener(SparkConf conf) {
    this.exporter = Exporter.forConf(conf);
  }

  @Override
  public void onQueryStarted(QueryStartedEvent event) {
    exporter.started(event.id().toString(), event.name());
  }

  @Override
  public void onQueryProgress(QueryProgressEvent event) {
    exporter.progress(event.progress().json());
  }

  @Override
  public void onQueryIdle(QueryIdleEvent event) {
    exporter.idle(event.id().toString());
  }

  @Override
  public void onQueryTerminated(QueryTerminatedEvent event) {
    exporter.terminated(event.id().toString(), event.exception().isDefined());
  }
}
