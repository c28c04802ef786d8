# `make demo` and `make test` set up everything they need; both are quick once set up.
PY        := .venv/bin/python
VENV      := .venv/.installed
JAR       := java/target/pyd4j-java.jar
JAVA_SRC  := $(shell find java/src examples/src examples/spark/src tests/fixtures/java/src tests/fixtures/java-compat/src -type f 2>/dev/null)
MVN       := mvn -q -B
# Side-agent library: CUDA build where nvcc is found, host-only build elsewhere (same C ABI).
NATIVE_LIB := native/build/libpyd4j_agent.so
NATIVE_SRC := $(shell find native/include native/src native/tests native/CMakeLists.txt -type f 2>/dev/null)

# CUDA build of the side-agent, compiled and linked with nvcc from pip (CUDA 13 wheels) in its own
# build directory: a compile check that needs no GPU (its device tests skip where there is none).
CUDA_VENV  := .venv-cuda
CUDA_BUILD := native/build-cuda-check
CUDA_WHEELS := nvidia-cuda-nvcc nvidia-cuda-runtime nvidia-cuda-crt nvidia-nvvm

# MKL's libraries for ND4J's JavaCPP (1.5.7), in the local Maven repository: `tune --speed` and
# `pyd4j nd4j-build` try MKL in OpenBLAS's place from there (never on ND4J's default class path).
MKL_VERSION := 2022.0-1.5.7
MKL_JAR     := $(HOME)/.m2/repository/org/bytedeco/mkl/$(MKL_VERSION)/mkl-$(MKL_VERSION)-linux-x86_64-redist.jar

# The wheel carries the helper/agent jar, ASM relocated inside it (not ND4J: jobs bring their own classpath).
WHEEL_JARS := pyd4j/jvm/java

.PHONY: setup demo test bench bench-list clean cuda-check wheel hooks

setup: hooks $(VENV) $(JAR) $(NATIVE_LIB) $(MKL_JAR)

# Commit subjects of at most 72 characters: git runs .githooks/commit-msg (a no-op outside a git checkout).
hooks:
	@if [ "$$(git rev-parse --show-toplevel 2>/dev/null)" = "$$(pwd -P)" ] && \
	  [ "$$(git config core.hooksPath)" != .githooks ]; then \
	  git config core.hooksPath .githooks && echo "git hooks: core.hooksPath = .githooks"; fi

$(VENV): pyproject.toml constraints.txt
	python3 -m venv .venv
	.venv/bin/pip install -q --upgrade pip
	.venv/bin/pip install -q -c constraints.txt -e ".[dev,spark,serve]"
	touch $@

# The nd4j-native classifier (avx2/avx512) is chosen for this CPU by pyd4j itself.
$(JAR): $(VENV) pom.xml java/pom.xml examples/pom.xml examples/spark/pom.xml tests/fixtures/java/pom.xml tests/fixtures/java-compat/pom.xml .mvn/settings.xml $(JAVA_SRC)
	@# copy-dependencies only adds jars: a stale one of another release would stay on the older-release fixture's classpath
	rm -rf tests/fixtures/java-compat/target/lib
	@# install, not package: jobs built with `mvn exec:…` against the helper jar resolve it from the local repository
	$(MVN) install -DskipTests -Dnd4j.classifier=$$($(PY) -m pyd4j.memory.machine --nd4j-classifier)
	touch $@

$(MKL_JAR):
	$(MVN) dependency:get -Dartifact=org.bytedeco:mkl:$(MKL_VERSION):jar:linux-x86_64-redist -Dtransitive=false

$(NATIVE_LIB): $(NATIVE_SRC)
	cmake -S native -B native/build -DCMAKE_BUILD_TYPE=Release >/dev/null
	cmake --build native/build -j
	touch $@

demo: setup
	.venv/bin/pyd4j doctor
	$(PY) examples/quickstart.py
	@# The main job: tune the Maven-built LeNet example (profile, flags from measured peaks, verify).
	rm -rf examples/target/demo-tune
	.venv/bin/pyd4j tune --out examples/target/demo-tune -- java -cp "examples/target/pyd4j-examples.jar:java/target/lib/*" org.pyd4j.examples.TrainLeNetSynthetic 100 16 2

test: setup cuda-check
	ctest --test-dir native/build --output-on-failure -j2
	$(PY) -m pytest

$(CUDA_VENV)/.installed: constraints.txt
	python3 -m venv $(CUDA_VENV)
	$(CUDA_VENV)/bin/pip install -q -c constraints.txt $(CUDA_WHEELS)
	touch $@

cuda-check: $(CUDA_VENV)/.installed
	@# The wheels ship libcudart.so.13 only; CMake's FindCUDAToolkit links against libcudart.so.
	tk=$$(echo $(CUDA_VENV)/lib/python3*/site-packages/nvidia/cu13) && \
	  ln -sf libcudart.so.13 $$tk/lib/libcudart.so && \
	  cmake -S native -B $(CUDA_BUILD) -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_COMPILER=$$PWD/$$tk/bin/nvcc >/dev/null && \
	  cmake --build $(CUDA_BUILD) -j && \
	  test "$$(nm -D --defined-only $(CUDA_BUILD)/libpyd4j_agent.so | grep -c pyd4j_agent_)" -gt 0 && \
	  ldd $(CUDA_BUILD)/libpyd4j_agent.so | grep -q libcudart && \
	  ctest --test-dir $(CUDA_BUILD) --output-on-failure -j2

wheel: $(JAR)
	rm -rf $(WHEEL_JARS) dist
	mkdir -p $(WHEEL_JARS)
	cp $(JAR) $(WHEEL_JARS)/
	$(PY) -m build --wheel --outdir dist . >/dev/null; rc=$$?; rm -rf $(WHEEL_JARS) build; exit $$rc
	@ls dist/*.whl

# Each benchmark writes JSON to benchmarks/results/ (figures in benchmarks/README.md); `make bench-list`
# lists what each measures and how long it takes.
BENCHMARKS := interop plan_speed depth sweeps calibration cpu_profile memory_model malloc_env batchnorm_backlog lstm_steps collector_choice flags_accuracy explicit_gc_limits agent_overhead live_heap prefetch workspaces spark agent_gpu tiers planned_training zoo_coverage zoo_speed leak_corpus tuned_rerun speed_tuning prefetch_depth backends serving serve_slices serve_fuzz reader_fuzz sigterm network_generator inference_footprint sliced_exactness
bench-list: $(VENV)
	$(PY) -m benchmarks.harness

bench: setup bench-list
	set -e; for b in $(BENCHMARKS); do echo "== $$b"; $(PY) benchmarks/$$b.py; done
	$(PY) benchmarks/speed_tuning.py --spark
	$(PY) benchmarks/malloc_env.py --setting MALLOC_MMAP_THRESHOLD_=131072 --runs lenet@32,deep_cnn_bn@8,lstm@32,resnet_graph@16
	$(PY) benchmarks/malloc_env.py --setting MALLOC_MMAP_THRESHOLD_=65536 --baseline MALLOC_MMAP_THRESHOLD_=131072 --iterations 100 --runs lstm@32,lstm@128,lenet@32,deep_cnn_bn@8,policy_value@16,resnet_graph@16 --out benchmarks/results/malloc_mmap_threshold_65536.json
	$(PY) benchmarks/malloc_env.py --setting MALLOC_MMAP_THRESHOLD_=16384 --baseline MALLOC_MMAP_THRESHOLD_=131072 --iterations 100 --runs lstm@32,lstm@128,lenet@32,deep_cnn_bn@8,policy_value@16,resnet_graph@16 --out benchmarks/results/malloc_mmap_threshold_16384.json
	@if [ -n "$(EXAMPLES)" ]; then $(PY) benchmarks/examples_speed.py --checkout "$(EXAMPLES)" && \
	$(PY) benchmarks/examples_flags.py --checkout "$(EXAMPLES)" && \
	$(PY) benchmarks/jit_cap.py --checkout "$(EXAMPLES)"; \
	else echo "examples_speed, examples_flags and jit_cap not run: give EXAMPLES=<a deeplearning4j-examples checkout>"; fi

clean:
	rm -rf .venv $(CUDA_VENV) java/target native/build $(CUDA_BUILD)
