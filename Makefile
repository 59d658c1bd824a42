# spark-ext: every target creates and uses .venv/ in the repository root.
# `make test` and `make demo` work from a fresh clone: they install the Python packages,
# resolve Kafka / Artemis from Maven Central (cached outside git) and start the services.

# Values from the environment are ignored (CI must run the whole suite whatever the
# environment says); set them on the command line: make test PYTEST_ARGS="-k kafka".
ifeq ($(origin PYTHON),environment)
PYTHON := 3.11
endif
ifeq ($(origin PYSPARK),environment)
PYSPARK := 4.0.5
endif
ifeq ($(origin PYTEST_ARGS),environment)
PYTEST_ARGS :=
endif
ifeq ($(origin TEST_WORKERS),environment)
TEST_WORKERS := 2
endif
# make test-compat: the compat subset on this PySpark release and Python version (default:
# the oldest supported, spark_ext/compat.py PYSPARK_FLOOR); .venv itself is python3's.
PYSPARK ?= 4.0.5
PYTHON ?= 3.11
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
DOCS_STAMP := $(VENV)/.installed-docs
PYTEST_ARGS ?=
TEST_WORKERS ?= 2
CASES ?=
PIPELINES ?=
MINUTES ?= 60
SOAK_ARGS ?=
# The JVM companion jar (jvm/): the windows' frame fold and the metrics listener. Its version is the package's.
VERSION := $(shell sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml)
JAR    := spark_ext/jars/spark-ext-native_2.13-$(VERSION).jar
JAVA_SRC := jvm/pom.xml $(shell find jvm/src -type f 2>/dev/null)

.PHONY: help venv jvm services services-down services-status cds test test-compat unit lint docs demo cluster-demo bench faults soak clean

help:
	@echo "make test | test-compat [PYSPARK=4.0.5 PYTHON=3.11] | demo | cluster-demo | services | services-down | lint | unit | jvm | docs | bench | faults | soak [MINUTES=60] | clean"

# The editable install builds the C modules (the Kafka record codec, the Avro decoder) in place, so their sources are prerequisites.
$(STAMP): pyproject.toml spark_ext/connectors/kafka/_records.c $(wildcard spark_ext/schemas/*.c spark_ext/schemas/*.h)
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q -e '.[dev]' --config-settings editable_mode=compat
	touch $(STAMP)

venv: $(STAMP)

# Built with Maven (dependencies cached in ~/.m2, so offline after the first run), copied
# where the wheel ships it, and installed into the local Maven repository, where
# spark-submit --packages dev.sparkext:spark-ext-native_2.13:$(VERSION) finds it offline.
$(JAR): $(JAVA_SRC)
	cd jvm && mvn -B -q --no-transfer-progress -Dstyle.color=never install
	# Ivy (--packages) keeps its own copy of a release once resolved: drop ours, so the
	# next --packages takes this build from ~/.m2 rather than an earlier one of this version.
	rm -rf $(HOME)/.ivy2*/cache/dev.sparkext $(HOME)/.ivy2*/jars/dev.sparkext_*
	mkdir -p spark_ext/jars && rm -f spark_ext/jars/*.jar
	cp jvm/target/spark-ext-native_2.13-$(VERSION).jar $@

jvm: $(JAR)

# The docs extra (MkDocs, Material, matplotlib) on top of .[dev]: the site's option tables
# import the connectors, and make bench draws its charts with matplotlib.
$(DOCS_STAMP): $(STAMP)
	$(PY) -m pip install -q -e '.[dev,docs]' --config-settings editable_mode=compat
	touch $(DOCS_STAMP)

services: $(STAMP)
	$(PY) -m services up

# The class-data-sharing archive of Spark's classes the suite's driver JVMs map (built once
# per PySpark install and JDK, cached outside the checkout; tests/support/cds.py).
cds: $(STAMP)
	$(PY) -m tests.support.cds

services-down:
	@if [ -x $(PY) ]; then $(PY) -m services down; fi

services-status: $(STAMP)
	$(PY) -m services status

# mypy's cache lives outside the checkout, so a fresh clone checks only what changed (it
# re-checks any module whose source differs from the cached one).
lint: $(STAMP)
	$(VENV)/bin/ruff check .
	MYPY_CACHE_DIR=$(HOME)/.cache/spark-ext/mypy $(VENV)/bin/mypy

# Unit tests only: no services, no Spark session.
unit: $(JAR) $(STAMP)
	$(PY) -m pytest -m "not spark and not services" $(PYTEST_ARGS)

# Two pytest workers: with them the suite keeps both cores busy (99% in vmstat; three
# workers took 13:35 against two's 12:39 on 2026-12-06). Tests
# that stop and start a shared service (marker restarts_services) then run alone. Exit
# status 5 is "no test selected", for a PYTEST_ARGS="-k ..." that selects from one part only.
# Then the suite fails if it left a prepared, XA or open Kafka transaction on the servers.
test: $(JAR) $(STAMP) lint services cds
	$(PY) -m pytest -n $(TEST_WORKERS) --dist worksteal -m "not restarts_services and not compat_only and not kafka_cluster and not campaign and not broker_clock" \
	  --durations=40 \
	  $(PYTEST_ARGS) || [ $$? -eq 5 ]
	$(PY) -m pytest -m "restarts_services and not compat_only and not kafka_cluster and not campaign and not broker_clock" \
	  --durations=10 $(PYTEST_ARGS) || [ $$? -eq 5 ]
	$(PY) -m tests.leftovers

# The tests marked compat, on PySpark $(PYSPARK) and Python $(PYTHON), from the built wheel
# in a virtualenv cached in ~/.cache/spark-ext/compat (tests/compat_env.py).
test-compat: $(JAR) $(STAMP) services
	$(PY) -m tests.compat_env --pyspark $(PYSPARK) --python $(PYTHON) $(PYTEST_ARGS)

demo: $(JAR) $(STAMP) services
	$(PY) -m examples.payments.demo

# The same job on a local standalone cluster (a master, two workers), environment shipped.
cluster-demo: $(JAR) $(STAMP) services
	$(PY) -m examples.payments.cluster

# The documentation site into site/ (git-ignored). --strict: a broken link, a page missing
# from the nav or an option without a description fails the build (not with --quiet: it
# hides the warnings strict mode counts). The connectors' client libraries, imported for
# the option tables, would log deprecation warnings of their own.
docs: $(DOCS_STAMP)
	NO_MKDOCS_2_WARNING=1 PYTHONWARNINGS=ignore::DeprecationWarning $(VENV)/bin/mkdocs build --strict --site-dir site

bench: $(JAR) $(DOCS_STAMP) services
	$(PY) -m bench $(CASES)

# Fault campaigns too long for make test's budget run here: the short campaign (every
# failpoint the rest of the suite does not crash, once, plus a zombie run, a moved
# checkpoint, a checkpoint reset and service restarts under running pipelines; a worker
# host frozen on a standalone cluster; a Kafka checkpoint copied again after its old
# location finished; tests marked campaign), the faults of a three-broker
# cluster of its own (marked kafka_cluster: a broker frozen past the client timeouts,
# leaders killed and elected back) and the tests that wait for a broker's own expiry
# (marked broker_clock). Then the seeded campaign over every pipeline.
faults: $(JAR) $(STAMP) services
	$(PY) -m pytest -m "campaign or kafka_cluster or broker_clock" --durations=10
	$(PY) -m bench.faults $(if $(SEED),--seed $(SEED)) $(if $(FAULTS_CRASHES),--crashes $(FAULTS_CRASHES)) $(PIPELINES)

# The payments job for MINUTES (default 60) at a steady rate with kill -9s, sampled every
# minute, then verified; ends with a SOAK line (bench/soak). CI never runs it.
soak: $(JAR) $(DOCS_STAMP) services
	$(PY) -m bench.soak --minutes $(MINUTES) $(SOAK_ARGS)

clean: services-down
	rm -rf .local .pytest_cache .mypy_cache .ruff_cache build *.egg-info site jvm/target spark_ext/jars
	find spark_ext -name "*.so" -delete
