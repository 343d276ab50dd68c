# Strandline: `make run` starts ZooKeeper and a cluster; `make test` runs the whole suite.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
ARGS   ?=

.PHONY: run test test-unit lint typecheck docs bench lab kcat browser nftables iproute2 maven kafka-python-suite clean

# A test prerequisite that could not be installed fails `make test` under CI=true (.ci/run sets
# it); elsewhere its tests skip, each saying why. $(call require,COMMAND,PACKAGE)
require = command -v $(1) >/dev/null 2>&1 || [ "$$CI" != true ] || { \
  echo "CI=true: $(2) could not be installed: make test fails rather than skip its tests"; exit 1; }

$(VENV)/.python-ok:
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "Strandline needs Python 3.11 or newer; found " + sys.version.split()[0])'
	@$(PYTHON) -m venv $(VENV)
	@$(BIN)/python -m pip install -q --upgrade pip
	@touch $@

$(VENV)/.installed: $(VENV)/.python-ok pyproject.toml
	$(BIN)/python -m pip install -q -e .
	@touch $@

$(VENV)/.test-installed: $(VENV)/.installed pyproject.toml
	$(BIN)/python -m pip install -q -e '.[test]'
	@touch $@

$(VENV)/.lint-installed: $(VENV)/.installed pyproject.toml
	$(BIN)/python -m pip install -q -e '.[lint]'
	@touch $@

# ruff: pyflakes, bugbear and complexity, configured in pyproject.toml
lint: $(VENV)/.lint-installed
	$(BIN)/ruff check --no-cache .

# mypy --strict over the packages and modules listed in pyproject.toml's [tool.mypy] (all of src/);
# each type: ignore there names its code and says why (tools/check_type_ignores.py)
typecheck: $(VENV)/.lint-installed
	$(BIN)/mypy --no-incremental
	$(BIN)/python tools/check_type_ignores.py

$(VENV)/.docs-installed: $(VENV)/.installed pyproject.toml
	$(BIN)/python -m pip install -q -e '.[docs]'
	@touch $@

# The docs site (mkdocs.yml, docs/, tools/docs_hooks.py) into build/site/; --strict: a broken link,
# a page left out of the nav or a generated table that cannot be written fails the build.
docs: $(VENV)/.docs-installed
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

run: $(VENV)/.installed
	$(BIN)/strandline up $(ARGS)

# Debian's kcat for the kcat tests; skipped (and those tests skip) where it cannot be installed,
# except under CI=true.
kcat:
	@command -v kcat >/dev/null 2>&1 || { \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo "sudo -n" ); \
	  { $$SUDO apt-get install -y -q kcat >/dev/null 2>&1 || \
	    { $$SUDO apt-get update -q >/dev/null 2>&1 && $$SUDO apt-get install -y -q kcat >/dev/null 2>&1; }; } \
	  || echo "kcat could not be installed; the kcat tests will be skipped"; }
	@$(call require,kcat,kcat)

# Debian's Maven, which fetches Apache Kafka's jars from Maven Central for the tests that run Kafka
# itself next to Strandline (strandline reference), builds the Kafka Streams test application (with
# the JDK's javac) and fetches Spark's Kafka connector (tests/integration/maven_build.py); skipped (and
# those tests skip) where it cannot be installed, except under CI=true.
maven:
	@command -v mvn >/dev/null 2>&1 || { \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo "sudo -n" ); \
	  { $$SUDO apt-get install -y -q maven >/dev/null 2>&1 || \
	    { $$SUDO apt-get update -q >/dev/null 2>&1 && $$SUDO apt-get install -y -q maven >/dev/null 2>&1; }; } \
	  || echo "maven could not be installed; the tests that run Apache Kafka will be skipped"; }
	@$(call require,mvn,maven)

# Debian's Chromium and ChromeDriver for the console's browser test; skipped (and that test skips) where
# they cannot be installed, except under CI=true.
browser:
	@{ command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1; } || { \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo "sudo -n" ); \
	  { $$SUDO apt-get install -y -q chromium chromium-driver >/dev/null 2>&1 || \
	    { $$SUDO apt-get update -q >/dev/null 2>&1 && $$SUDO apt-get install -y -q chromium chromium-driver >/dev/null 2>&1; }; } \
	  || echo "chromium could not be installed; the console's browser test will be skipped"; }
	@$(call require,chromium,chromium)
	@$(call require,chromedriver,chromium-driver)

# Debian's nftables and iproute2 (`nft` and `ip`) for the lab's network partitions (root only:
# namespaces and firewall rules need it); skipped (and the partition scenarios skip) where they
# cannot be installed, except under CI=true.
nftables:
	@command -v nft >/dev/null 2>&1 || [ "$$(id -u)" != 0 ] || { \
	  { apt-get install -y -q nftables >/dev/null 2>&1 || \
	    { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q nftables >/dev/null 2>&1; }; } \
	  || echo "nftables could not be installed; the lab's network partition scenarios will be skipped"; }
	@$(call require,nft,nftables)

iproute2:
	@command -v ip >/dev/null 2>&1 || [ "$$(id -u)" != 0 ] || { \
	  { apt-get install -y -q iproute2 >/dev/null 2>&1 || \
	    { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q iproute2 >/dev/null 2>&1; }; } \
	  || echo "iproute2 could not be installed; the lab's network partition scenarios will be skipped"; }
	@$(call require,ip,iproute2)

# The docs site is built first (a few seconds), so that a change that breaks it fails the suite.
# Then the integration and differential test files run two at a time (pytest-xdist, a file to a
# worker, so that each module keeps its one cluster; every cluster takes free ports and its own
# directories, every lab its own network), except the files that measure time or rates (the lab's
# fault scenarios, produce quotas): those run one after another once the others are done, with the
# unit and simulator tests (in-process, CPU-bound, about 9 minutes) beside them, the load under
# which their bounds were set. One after the other everything took 45 minutes on a 2-core machine.
TIMED_TESTS = tests/integration/test_lab.py tests/integration/test_lab_txn.py tests/integration/test_lab_kafka.py \
	tests/integration/test_security.py tests/integration/test_client_quotas.py

test: $(VENV)/.test-installed docs kcat browser nftables iproute2 maven
	@echo "pytest tests/integration tests/differential, two files at a time, except the timed ones"; \
	$(BIN)/python -m pytest -q -rs -n 2 --dist loadfile $(addprefix --ignore=,$(TIMED_TESTS)) \
	  tests/integration tests/differential; parallel=$$?; \
	unit_log=$$(mktemp); \
	$(BIN)/python -m pytest -q -rs -p no:cacheprovider tests/unit tests/sim > $$unit_log 2>&1 & unit=$$!; \
	trap 'kill $$unit 2>/dev/null; rm -f $$unit_log' INT TERM; \
	echo "pytest $(TIMED_TESTS) (tests/unit and tests/sim run beside them)"; \
	$(BIN)/python -m pytest -q -rs $(TIMED_TESTS); timed=$$?; \
	wait $$unit; unit_status=$$?; \
	echo "pytest tests/unit tests/sim:"; cat $$unit_log; rm -f $$unit_log; \
	[ $$parallel = 0 ] && [ $$timed = 0 ] && [ $$unit_status = 0 ]

test-unit: $(VENV)/.test-installed
	$(BIN)/python -m pytest -q tests/unit tests/sim

# kafka-python's own SSL and SASL integration tests (from its sdist, unchanged) against Strandline
# brokers, every one of them required to pass (tests/clients/test_kafka_python_suite.py);
# about 2 minutes, kept out of `make test` for CI's 40 minutes. `python -m tests.kafka_python_suite.run`
# runs the suite alone and prints its counts.
kafka-python-suite: $(VENV)/.test-installed
	nice -n 10 $(BIN)/python -m pytest -q -rs -p no:cacheprovider tests/clients

bench: $(VENV)/.test-installed
	$(BIN)/python benchmarks/load.py
	$(BIN)/python benchmarks/replication_cpu.py --runs 3
	$(BIN)/python benchmarks/replication_floor.py --runs 3
	$(BIN)/python benchmarks/produce_consume.py
	$(BIN)/python benchmarks/replicated_produce.py
	$(BIN)/python benchmarks/compaction_latency.py
	$(BIN)/python benchmarks/offsets_load.py
	$(BIN)/python benchmarks/kafka_compare.py
	@if command -v nats-server > /dev/null; then \
		$(BIN)/pip install -q nats-py==2.16.0 && $(BIN)/python benchmarks/nats_compare.py; \
	else echo "bench: no nats-server on the PATH (apt install nats-server): the NATS comparison is skipped"; fi

# SAFE-1 on real processes: TRIALS random fault mixes (partitions need root), then the table.
TRIALS ?= 20
lab: $(VENV)/.test-installed nftables iproute2
	$(BIN)/strandline lab run SAFE --trials $(TRIALS) --data-dir lab-runs

clean:
	rm -rf $(VENV) build *.egg-info
