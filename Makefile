# `make demo` and `make test` set up everything they need; both are quick once set up.
PY        := .venv/bin/python
VENV      := .venv/.installed
JAR       := java/target/pyd4j-java.jar
JAVA_SRC  := $(shell find java/src examples/src tests/fixtures/java/src -type f 2>/dev/null)
MVN       := mvn -q -B
# Side-agent library: CUDA build where nvcc is found, host-only build elsewhere (same C ABI).
NATIVE_LIB := native/build/libpyd4j_agent.so
NATIVE_SRC := $(shell find native/include native/src native/tests native/CMakeLists.txt -type f 2>/dev/null)

.PHONY: setup demo test bench clean

setup: $(VENV) $(JAR) $(NATIVE_LIB)

$(VENV): pyproject.toml constraints.txt
	python3 -m venv .venv
	.venv/bin/pip install -q --upgrade pip
	.venv/bin/pip install -q -c constraints.txt -e ".[dev]"
	touch $@

# The nd4j-native classifier (avx2/avx512) is chosen for this CPU by pyd4j itself.
$(JAR): $(VENV) pom.xml java/pom.xml examples/pom.xml tests/fixtures/java/pom.xml $(JAVA_SRC)
	$(MVN) package -DskipTests -Dnd4j.classifier=$$($(PY) -m pyd4j.memory.machine --nd4j-classifier)
	touch $@

$(NATIVE_LIB): $(NATIVE_SRC)
	cmake -S native -B native/build -DCMAKE_BUILD_TYPE=Release >/dev/null
	cmake --build native/build -j
	touch $@

demo: setup
	.venv/bin/pyd4j doctor
	$(PY) examples/quickstart.py
	@# The main job: tune the Maven-built LeNet example (profile, flags from measured peaks, verify).
	rm -rf examples/target/demo-tune
	.venv/bin/pyd4j tune --out examples/target/demo-tune -- java -cp "examples/target/pyd4j-examples.jar:java/target/lib/*" org.pyd4j.examples.TrainLeNetSynthetic 20 16 2

test: setup
	ctest --test-dir native/build --output-on-failure -j2
	$(PY) -m pytest

# Each benchmark writes JSON to benchmarks/results/ (figures in benchmarks/README.md).
BENCHMARKS := interop plan_speed depth sweeps calibration cpu_profile flags_accuracy agent_overhead prefetch workspaces agent_gpu
bench: setup
	set -e; for b in $(BENCHMARKS); do echo "== $$b"; $(PY) benchmarks/$$b.py; done

clean:
	rm -rf .venv java/target native/build
