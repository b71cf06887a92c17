#!/bin/sh
# Installs the image's Debian packages; run by deploy/Containerfile in both stages.
#   install-packages.sh build|runtime
# Environment (Containerfile ARGs): WITH_CUDA=0|1, CUDA_VERSION=12-4, WITH_NEURON=0|1.
# The architecture is the base root filesystem's (amd64 or arm64). CUDA comes from NVIDIA's Debian 12
# repository (x86_64 or sbsa); the Neuron userland (libnrt, collectives) from the Neuron apt repository,
# amd64 only (Trainium/Inferentia hosts are x86_64). Neither is needed for the CPU image.
set -eu
stage=$1
arch=$(dpkg --print-architecture)
WITH_CUDA=${WITH_CUDA:-0}
WITH_NEURON=${WITH_NEURON:-0}
CUDA_VERSION=${CUDA_VERSION:-12-4}
export DEBIAN_FRONTEND=noninteractive
apt_install() { apt-get install -y -q --no-install-recommends "$@"; }

apt-get update -q
apt_install ca-certificates curl gnupg

if [ "$WITH_CUDA" = 1 ]; then
  case $arch in amd64) nv=x86_64 ;; arm64) nv=sbsa ;; *) echo "no CUDA for $arch" >&2; exit 1 ;; esac
  curl -fsSL -o /tmp/cuda-keyring.deb \
    "https://developer.download.nvidia.com/compute/cuda/repos/debian12/$nv/cuda-keyring_1.1-1_all.deb"
  dpkg -i /tmp/cuda-keyring.deb && rm /tmp/cuda-keyring.deb
fi
if [ "$WITH_NEURON" = 1 ]; then
  if [ "$arch" != amd64 ]; then
    echo "install-packages: Neuron userland is x86_64 only; skipped on $arch"; WITH_NEURON=0
  else
    curl -fsSL https://apt.repos.neuron.amazonaws.com/GPG-PUB-KEY-AMAZON-AWS-NEURON.PUB |
      gpg --dearmor -o /usr/share/keyrings/neuron.gpg
    echo "deb [signed-by=/usr/share/keyrings/neuron.gpg] https://apt.repos.neuron.amazonaws.com jammy main" \
      > /etc/apt/sources.list.d/neuron.list
  fi
fi
apt-get update -q

case $stage in
build)
  apt_install build-essential cmake pkg-config git \
    libeigen3-dev libopenblas-dev libhwloc-dev libhdf5-dev \
    libavformat-dev libavcodec-dev libavutil-dev libswscale-dev libswresample-dev libsndfile1-dev \
    libyaml-cpp-dev libcli11-dev nlohmann-json3-dev libopenmpi-dev openmpi-bin
  if [ "$WITH_CUDA" = 1 ]; then
    apt_install "cuda-nvcc-$CUDA_VERSION" "cuda-cudart-dev-$CUDA_VERSION" "libcublas-dev-$CUDA_VERSION" libnccl-dev
  fi
  if [ "$WITH_NEURON" = 1 ]; then apt_install aws-neuronx-runtime-lib aws-neuronx-collectives; fi
  ;;
runtime)
  # The shared libraries perceiver-* link (ldd of build/bin), OpenMPI and its launcher transport (sshd),
  # procps for the signal-forwarding wrappers, tini as PID 1.
  apt_install libgomp1 libopenblas0-pthread libhwloc15 libhdf5-103-1 \
    libavformat59 libavcodec59 libavutil57 libswscale6 libswresample4 libsndfile1 libyaml-cpp0.7 \
    libopenmpi3 openmpi-bin openssh-server openssh-client procps tini
  if [ "$WITH_CUDA" = 1 ]; then apt_install "cuda-cudart-$CUDA_VERSION" "libcublas-$CUDA_VERSION" libnccl2; fi
  if [ "$WITH_NEURON" = 1 ]; then apt_install aws-neuronx-runtime-lib aws-neuronx-collectives; fi
  # sshd runs as the training user (deploy/image/perceiver-sshd); no host keys baked into the image.
  rm -f /etc/ssh/ssh_host_*
  ;;
*) echo "usage: install-packages.sh build|runtime" >&2; exit 2 ;;
esac
apt-get purge -y -q --auto-remove gnupg >/dev/null 2>&1 || true
apt-get clean
rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /var/log/apt /var/log/dpkg.log
