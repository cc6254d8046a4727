# Two commands do everything on a fresh Debian machine:
#   make demo   - set up, then build the documents' kernels and run them (locally and through a local RPC server)
#   make test   - set up, then run the whole test suite
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
APT_PACKAGES := lld qemu-user gcc-aarch64-linux-gnu gcc-arm-linux-gnueabihf libc6-dev-arm64-cross libc6-dev-armhf-cross \
                pocl-opencl-icd ocl-icd-opencl-dev clinfo libdnnl-dev \
                gcc-arm-none-eabi libnewlib-arm-none-eabi qemu-system-arm \
                clang libclang-rt-14-dev

.PHONY: setup system-packages demo test test-heavy bench fuzz clean

system-packages:
	@missing=""; for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then echo "installing:$$missing"; apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	  else echo "note: missing Debian packages:$$missing (run as root to install; cross/qemu/OpenCL tests will skip)"; fi; \
	fi

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test,cuda]'
	touch $@

setup: system-packages $(VENV)/.installed

demo: setup
	$(PY) examples/run_all.py

test: setup
	$(PY) -m pytest -q -x -rs --durations=15 -m "not heavy" tests

# The tests marked heavy: full-size models on PoCL and whole tuning examples (tens of minutes on 2 cores).
test-heavy: setup
	$(PY) -m pytest -q --durations=15 -m heavy tests

# Every libFuzzer target in fuzz/ for FUZZ_SECONDS each (make test runs each for a few seconds).
FUZZ_SECONDS ?= 600
fuzz: system-packages
	$(MAKE) -C fuzz run SECONDS=$(FUZZ_SECONDS)

bench: setup
	$(PY) bench/matmul.py && $(PY) bench/build.py && $(PY) bench/import_time.py

clean:
	rm -rf $(VENV) build *.egg-info
