# softrdma: the two commands of the Quick start live here.
#
#   make demo    install what is missing, build, run a real RDMA transfer between two processes
#   make check   install what is missing, build (normal + ASan/UBSan), run the whole suite (ctest)
#
# Everything else is plumbing for those two.

BUILD      ?= build
BUILD_SAN  ?= build-san
BUILD_FUZZ ?= build-fuzz
JOBS       ?= $(shell nproc 2>/dev/null || echo 2)
CTEST_ARGS ?=

# Debian packages the build and the suite need. Why each one is here: see README.md.
DEB_PKGS = gcc make cmake pkg-config libibverbs-dev librdmacm-dev \
           ibverbs-utils rdmacm-utils perftest tshark iproute2 ethtool python3 \
           netcat-openbsd netcat-traditional \
           qemu-system-x86 linux-image-amd64 busybox-static cpio libc6-dev \
           ibverbs-providers kmod \
           clang libclang-rt-14-dev \
           liburing-dev nbdkit nbdkit-plugin-dev libnbd-bin fio qemu-utils qperf iperf3 \
           ucx-utils libfabric-bin openmpi-bin libopenmpi-dev mpich libmpich-dev \
           python3-pyverbs \
           linux-source-6.1 linux-headers-amd64 xz-utils

.PHONY: all deps build build-san build-fuzz demo check test clean

all: build

deps:
	@missing=""; for p in $(DEB_PKGS); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "install ok installed" || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	  echo "softrdma: installing:$$missing"; \
	  if [ "$$(id -u)" != 0 ]; then SUDO=sudo; else SUDO=; fi; \
	  export DEBIAN_FRONTEND=noninteractive; \
	  $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq --no-install-recommends $$missing >/dev/null; \
	fi

build: deps
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
	@cmake --build $(BUILD) -j $(JOBS)

build-san: deps
	@cmake -S . -B $(BUILD_SAN) -DCMAKE_BUILD_TYPE=Debug -DSOFTRDMA_SANITIZE=ON >/dev/null
	@cmake --build $(BUILD_SAN) -j $(JOBS)

# libFuzzer harnesses (fuzz/): the engine alone, built with clang, ASan and UBSan.
build-fuzz: deps
	@cmake -S . -B $(BUILD_FUZZ) -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  -DSOFTRDMA_FUZZ=ON >/dev/null
	@cmake --build $(BUILD_FUZZ) -j $(JOBS)

demo: build
	@./tools/demo.sh $(BUILD)

# The whole suite: the normal build runs everything (unit, own C tests, unmodified Debian
# binaries, interop); the sanitizer build runs the unit and own C tests (label "san"); the fuzz
# build runs each harness for a few seconds and over every saved crash input (label "fuzz").
check: build build-san build-fuzz
	cd $(BUILD) && ctest --output-on-failure --timeout 600 -j $(JOBS) $(CTEST_ARGS)
	cd $(BUILD_SAN) && ctest --output-on-failure --timeout 600 -j $(JOBS) -L san $(CTEST_ARGS)
	cd $(BUILD_FUZZ) && ctest --output-on-failure --timeout 600 -j $(JOBS) -L fuzz $(CTEST_ARGS)

test: build
	cd $(BUILD) && ctest --output-on-failure $(CTEST_ARGS)

clean:
	rm -rf $(BUILD) $(BUILD_SAN) $(BUILD_FUZZ)
