#!/usr/bin/env bash
# Installs the Debian 12 packages strata builds with, when any is missing. Idempotent.
set -euo pipefail
PACKAGES=(
  build-essential cmake ninja-build ccache pkg-config git
  libdnnl-dev            # oneDNN: CPU GEMMs
  ocl-icd-opencl-dev opencl-headers  # OpenCL ICD loader + Khronos headers: the OpenCL backend (and Debian's dnnl CMake config)
  pocl-opencl-icd        # PoCL: an OpenCL device on the CPU, so the OpenCL backend's tests run without a GPU
  libabsl-dev            # Abseil: status, strings, containers
  nlohmann-json3-dev     # JSON: configs, tokenizer.json, CLI output
  libxxhash-dev          # hashing (prefix cache)
  libhwy-dev             # Highway: portable SIMD with run-time dispatch
  libpcre2-dev           # Unicode regexes of byte-level BPE pre-tokenizers
  libeigen3-dev          # Eigen (header-only): GPTQ's Cholesky factorizations and blocked updates
  libcpp-httplib-dev     # HTTP server of `strata serve` (and its tests' client)
  zlib1g-dev             # gzip request bodies, inflated by the server's reader with a size cap
  libgtest-dev googletest
  openmpi-bin            # mpirun: launches the ranks of `strata serve --tensor-parallel-size N` (tests use it)
  libopenmpi-dev         # MPI headers and library: --parallel-transport mpi, ranks on several hosts (optional to the build)
)
missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# The server's client test runs the official `openai` npm package: node and npm by command,
# since a machine may have them from elsewhere than Debian's packages.
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then missing+=(nodejs npm); fi
if ((${#missing[@]})); then
  echo "install-deps: installing ${missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "install-deps: all packages present"
fi
