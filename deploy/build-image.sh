#!/usr/bin/env bash
# Builds the perceiver image with buildah (no Docker engine, no registry pulls) and smoke-tests it.
#
#   deploy/build-image.sh [--arch amd64|arm64] [--variant cpu|cuda] [--tag NAME:TAG] [--jobs N] [--no-smoke]
#                         [--export FILE.tar] [--context-only DIR] [--smoke-only] [--build-arg K=V]...
#
# --variant cuda (`make image IMAGE_VARIANT=cuda`): the CUDA backend built with this machine's CUDA
# toolkit ($CUDA_HOME, default /usr/local/cuda: nvcc, headers, cuBLAS/cuBLASLt, NCCL), copied into the
# context's cuda-toolkit/ (Containerfile WITH_CUDA=context); the image carries the runtime libraries
# the programs load. Its smoke test also checks that, on this machine without a GPU, --device cuda
# says so in one line and --device cpu still trains.
#
# Steps (as root; `make image` runs it for amd64):
#  1. base root filesystem: debootstrap --variant=minbase bookworm (cached in $BUILD_IMAGE_DIR),
#     imported into buildah as localhost/perceiver-base:bookworm-<arch>;
#  2. a clean build context: the repository's tracked and new (not ignored) files that the image needs;
#  3. buildah build --storage-driver vfs --isolation chroot -f deploy/Containerfile;
#  4. smoke test with buildah run: perceiver-train --help; a 5-step tiny training run (perceiver-prep
#     synth of 3 classes x 4 clips, --model configs/tests/tiny_video.yaml); sshd as the non-root user,
#     logged into with a key, running a command (what an MPI launcher does).
# The build time and the image size are printed at the end.
#
# Environment: BUILD_IMAGE_DIR (default <repo>/build-image), DEBIAN_MIRROR (default deb.debian.org),
# STORAGE_DRIVER (default vfs).
# arm64 on an amd64 machine needs qemu-user-static + binfmt-support (debootstrap and buildah then run
# arm64 binaries under emulation; slow). See deploy/README.md for the multi-arch index and CUDA.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
arch=$(dpkg --print-architecture)
tag=
variant=cpu
jobs=$(nproc)
smoke=1
smoke_only=0
export_to=
context_only=
build_args=()
while [[ $# -gt 0 ]]; do
  case $1 in
    --arch) arch=$2; shift 2 ;;
    --tag) tag=$2; shift 2 ;;
    --variant) variant=$2; shift 2 ;;
    --jobs) jobs=$2; shift 2 ;;
    --no-smoke) smoke=0; shift ;;
    --smoke-only) smoke_only=1; shift ;;   # smoke-test the existing image again
    --export) export_to=$2; shift 2 ;;
    --context-only) context_only=$2; shift 2 ;;
    --build-arg) build_args+=(--build-arg "$2"); shift 2 ;;
    -h|--help) sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "build-image: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
case $variant in
  cpu) tag=${tag:-localhost/perceiver:dev} ;;
  cuda) tag=${tag:-localhost/perceiver:dev-cuda}; build_args+=(--build-arg WITH_CUDA=context) ;;
  *) echo "build-image: --variant $variant: expected cpu or cuda" >&2; exit 2 ;;
esac
cuda_home=$(readlink -f "${CUDA_HOME:-/usr/local/cuda}")
work=${BUILD_IMAGE_DIR:-$repo/build-image}
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
driver=${STORAGE_DRIVER:-vfs}
B=(buildah --storage-driver "$driver")
say() { printf '== %s\n' "$*"; }
mkdir -p "$work"

# --- 2. build context (first: --context-only needs nothing else) -----------------------------------
make_context() {
  local dst=$1
  rm -rf "$dst" && mkdir -p "$dst"
  (cd "$repo" && git ls-files -co --exclude-standard -- CMakeLists.txt cmake libperceiver apps configs \
      tests/train/tiny_video.yaml deploy | while read -r f; do [[ -e $f ]] && printf '%s\0' "$f"; done |
    tar --null -T - -cf -) | tar -xf - -C "$dst"
  mkdir -p "$dst/cuda-toolkit"
  if [[ $variant == cuda ]]; then copy_toolkit "$dst/cuda-toolkit"; else echo cpu > "$dst/cuda-toolkit/VARIANT"; fi
}

# The parts of the CUDA toolkit that building the CUDA backend needs (compiler, headers, the
# libraries it links, the static runtime CMake's compiler check links), symlinks kept as they are.
copy_toolkit() {
  local dst=$1
  [[ -x $cuda_home/bin/nvcc ]] || { echo "build-image: --variant cuda: no nvcc in $cuda_home (set CUDA_HOME)" >&2; exit 2; }
  [[ -e $cuda_home/include/nccl.h ]] || { echo "build-image: --variant cuda: no NCCL in $cuda_home" >&2; exit 2; }
  say "CUDA toolkit $cuda_home -> context (nvcc $("$cuda_home/bin/nvcc" --version | sed -n 's/.*release \([0-9.]*\).*/\1/p'))"
  (cd "$cuda_home" && tar -cf - bin nvvm include targets lib64 \
      lib/libcudart.so* lib/libcudart_static.a lib/libcudadevrt.a lib/libculibos.a \
      lib/libcublas.so* lib/libcublasLt.so* lib/libnccl.so* lib/stubs) | tar -xf - -C "$dst"
}
if [[ -n $context_only ]]; then
  make_context "$context_only"
  echo "build-image: context in $context_only (build it with: docker buildx build -f deploy/Containerfile $context_only)"
  exit 0
fi

[[ $(id -u) -eq 0 ]] || { echo "build-image: run as root (buildah with --isolation chroot and vfs storage)" >&2; exit 1; }
missing=()
command -v buildah >/dev/null || missing+=(buildah)
command -v debootstrap >/dev/null || missing+=(debootstrap)
if [[ ${#missing[@]} -gt 0 ]]; then
  say "installing ${missing[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
t_start=$(date +%s)

if [[ $smoke_only == 1 ]]; then t_build=$t_start t_done=$t_start; fi
# --- 1. base image -------------------------------------------------------------------------------
base=localhost/perceiver-base:bookworm-$arch
rootfs=$work/rootfs-$arch
if [[ $smoke_only == 0 ]] && ! "${B[@]}" inspect --type image "$base" >/dev/null 2>&1; then
  if [[ ! -d $rootfs ]]; then
    say "debootstrap --variant=minbase --arch $arch bookworm ($mirror)"
    rm -rf "$rootfs.tmp"
    debootstrap --variant=minbase --arch "$arch" bookworm "$rootfs.tmp" "$mirror"
    mv "$rootfs.tmp" "$rootfs"
  fi
  say "importing $rootfs as $base"
  cat > "$rootfs/etc/apt/sources.list" <<EOF
deb http://deb.debian.org/debian bookworm main
deb http://deb.debian.org/debian bookworm-updates main
deb http://deb.debian.org/debian-security bookworm-security main
EOF
  printf 'APT::Install-Recommends "false";\nAPT::Install-Suggests "false";\n' > "$rootfs/etc/apt/apt.conf.d/99norecommends"
  rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/log/*.log
  : > "$rootfs/etc/hostname"
  tar --numeric-owner -C "$rootfs" -cf "$work/rootfs-$arch.tar" .
  ctr=$("${B[@]}" from --arch "$arch" scratch)
  "${B[@]}" add "$ctr" "$work/rootfs-$arch.tar" /
  "${B[@]}" config --arch "$arch" --os linux \
    --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin --env LANG=C.UTF-8 \
    --cmd /bin/bash "$ctr"
  "${B[@]}" commit --rm "$ctr" "$base" >/dev/null
  rm -f "$work/rootfs-$arch.tar"
fi

# --- 2 + 3. context and build -------------------------------------------------------------------------
ctx=$work/context
if [[ $smoke_only == 0 ]]; then
make_context "$ctx"
say "buildah build -f deploy/Containerfile ($arch, $jobs jobs) -> $tag"
t_build=$(date +%s)
"${B[@]}" build --isolation chroot --arch "$arch" --layers=false \
  --build-arg "BASE=$base" --build-arg "JOBS=$jobs" "${build_args[@]}" \
  -f "$ctx/deploy/Containerfile" -t "$tag" "$ctx"
t_done=$(date +%s)
fi
size=$("${B[@]}" images --format '{{.Size}}' "$tag" | head -1)

# --- 4. smoke test -----------------------------------------------------------------------------------
if [[ $smoke == 1 ]]; then
  ctr=$("${B[@]}" from "$tag")
  trap '"${B[@]}" rm "$ctr" >/dev/null 2>&1 || true' EXIT
  run() { "${B[@]}" run --isolation chroot "$ctr" -- "$@"; }
  say "smoke 1/3: perceiver-train --help"
  run sh -c 'perceiver-train --help | head -5'
  say "smoke 2/3: tiny training run (3 classes x 4 clips, 5 steps) as $(run id -un)"
  t_smoke=$(date +%s)
  run sh -c 'set -e; d=/tmp/smoke; rm -rf $d; mkdir -p $d; : > $d/none.yaml
    perceiver-prep synth --out $d/kinetics --classes 3 --clips-per-class 4
    perceiver-train --config_file_path $d/none.yaml --model configs/tests/tiny_video.yaml \
      --dataset_dir $d/kinetics --logdir $d/logs --batch_size 2 --max_steps 5 --log_steps 1 \
      --save_steps 5 --num_workers 1 --threads 2 --do_eval=false
    echo "--- rank0.json"; cat $d/logs/rank0.json
    echo "--- checkpoints"; ls $d/logs/checkpoints
    echo "--- resume (--resume auto, --max_steps 6)"
    perceiver-train --config_file_path $d/none.yaml --model configs/tests/tiny_video.yaml \
      --dataset_dir $d/kinetics --logdir $d/logs --batch_size 2 --max_steps 6 --log_steps 1 \
      --num_workers 1 --threads 2 --do_eval=false --resume auto 2>&1 | tail -3'
  echo "(smoke training: $(( $(date +%s) - t_smoke )) s)"
  if [[ $variant == cuda ]]; then
    say "smoke cuda: the libraries resolve; --device cuda without a GPU is one clear line"
    run sh -c 'set -e; ldd /usr/local/lib/libperceiver_cuda.so.0 | grep -E "libcudart|libcublasLt|libnccl"
      ! ldd /usr/local/lib/libperceiver_cuda.so.0 | grep "not found"
      d=/tmp/smoke; if perceiver-train --config_file_path $d/none.yaml --model configs/tests/tiny_video.yaml \
          --dataset_dir $d/kinetics --logdir $d/logs-cuda --batch_size 2 --max_steps 1 --num_workers 1 \
          --threads 2 --do_eval=false --device cuda > $d/cuda.log 2>&1; then
        echo "--device cuda trained without a GPU?"; cat $d/cuda.log; exit 1; fi
      grep "no usable NVIDIA GPU" $d/cuda.log'
  fi
  say "smoke 3/3: non-root sshd (what an MPI launcher logs into)"
  port=$(( 20000 + RANDOM % 20000 ))
  run sh -c "set -e; mkdir -p \$HOME/.ssh; ssh-keygen -q -t ed25519 -N '' -f \$HOME/.ssh/id_ed25519
    cp \$HOME/.ssh/id_ed25519.pub \$HOME/.ssh/authorized_keys
    PERCEIVER_SSH_PORT=$port perceiver-sshd > /tmp/sshd.log 2>&1 & pid=\$!
    for i in \$(seq 50); do ssh -p $port -o BatchMode=yes -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null \
        -o LogLevel=ERROR 127.0.0.1 'echo ssh login as \$(id -un) ok; perceiver-train --help | head -1' 2>/dev/null && ok=1 && break; sleep 0.2; done
    kill \$(cat /tmp/perceiver-sshd/sshd.pid) 2>/dev/null || true; wait \$pid 2>/dev/null || true
    rm -rf \$HOME/.ssh /tmp/perceiver-sshd
    [ \"\${ok:-}\" = 1 ] || { cat /tmp/sshd.log; exit 1; }"
fi

if [[ -n $export_to ]]; then
  say "exporting $tag to oci-archive:$export_to"
  "${B[@]}" push "$tag" "oci-archive:$export_to:$tag"
fi
if [[ $smoke_only == 1 ]]; then say "image $tag ($arch): $size; smoke test passed"
else say "image $tag ($arch): $size; build $(( t_done - t_build )) s, total with base and smoke $(( $(date +%s) - t_start )) s"; fi
