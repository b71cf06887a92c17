#!/usr/bin/env bash
# The default data set: a synthetic Kinetics-layout set made with FFmpeg (perceiver-prep synth),
# then its train and validate splits decoded into HDF5 shards (perceiver-prep), where
# perceiver-train looks for them (DIR/prepared-<T>x<D>). What `make demo` trains on.
#   data/make-synthetic-kinetics.sh DIR [--classes 8] [--clips-per-class 24] [--seed 0]
#                                       [--num_frames 8] [--image_dim 64] [--num_workers 0]
#                                       [--bin build/bin]
# A second run keeps the set when it was made with the same --classes, --clips-per-class and
# --seed (same seed, same bytes), and keeps every shard that is still current (perceiver-prep's
# own reuse); a set made otherwise, or one this script did not make, is refused, naming what
# differs, so an old set is never trained on by mistake. Defaults are the demo's: 8 classes of
# 24 train clips (and 4 validation clips each), shards of 8 frames at 64x64, about 20 s on 2
# cores. --num_frames and --image_dim must match the model's (configs/demo.yaml: 8, 64; the
# kinetics700 preset: 16, 224).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
usage() { awk 'NR > 1 && !/^#/ { exit } NR > 1' "$0" | sed 's/^# \{0,1\}//'; }
die() { echo "make-synthetic-kinetics.sh: $*" >&2; exit 2; }

dir="" classes=8 clips=24 seed=0 frames=8 dim=64 workers=0 bin="$here/../build/bin"
while [[ $# -gt 0 ]]; do
  case $1 in
    --classes|--clips-per-class|--seed|--num_frames|--image_dim|--num_workers|--bin)
      [[ $# -ge 2 ]] || die "$1 needs a value"
      [[ $1 == --bin || $2 =~ ^[0-9]+$ ]] || die "$1 '$2': expected a whole number"
      case $1 in
        --classes) classes=$2 ;;
        --clips-per-class) clips=$2 ;;
        --seed) seed=$2 ;;
        --num_frames) frames=$2 ;;
        --image_dim) dim=$2 ;;
        --num_workers) workers=$2 ;;
        --bin) bin=$2 ;;
      esac
      shift 2 ;;
    -h|--help) usage; exit 0 ;;
    -*) die "unknown option '$1' (--help lists them)" ;;
    *) [[ -z $dir ]] || die "one DIR only ('$dir', then '$1')"; dir=$1; shift ;;
  esac
done
[[ -n $dir ]] || die "no DIR given: data/make-synthetic-kinetics.sh DIR [options] (--help lists them)"
prep="$bin/perceiver-prep"
[[ -x $prep ]] || die "$prep not built (make build, or --bin DIR)"

# The set's recipe, kept beside it. The file's name carries the version of what synth draws:
# bump it when that changes, so sets made by an older version are refused.
stamp="$dir/synthetic-set-v2"
recipe="classes=$classes clips_per_class=$clips seed=$seed"
if [[ -f $dir/annotations/train.csv ]]; then
  [[ -f $stamp ]] || die "$dir holds a data set this script did not make, one from a run that was" \
    "stopped, or one made by an older version (rings, hard edges): remove it (for the demo's: make demo-clean) or choose another DIR"
  made=$(cat "$stamp")
  # An empty recipe file: the set of a `make demo` from before the recipe was written, its 8 x 24, seed 0.
  [[ -n $made ]] || made="classes=8 clips_per_class=24 seed=0"
  [[ $made == "$recipe" ]] || die "$dir holds a set made with $made, not $recipe: remove it or choose another DIR"
  echo "synthetic set: kept $dir ($made)"
else
  echo "synthetic set: $classes classes x $clips train clips, seed $seed, into $dir (perceiver-prep synth)"
  "$prep" synth --out "$dir" --classes "$classes" --clips-per-class "$clips" --seed "$seed"
  echo "$recipe" > "$stamp"
fi

shards="$dir/prepared-${frames}x$dim"
for split in train validate; do
  echo "HDF5 shards, $split: $frames frames of ${dim}x$dim, 48 kHz audio, into $shards (perceiver-prep)"
  "$prep" --dataset_dir "$dir" --output_dir "$shards" --split "$split" --num_frames "$frames" \
    --image_dim "$dim" --num_workers "$workers"
done
if [[ $frames == 8 && $dim == 64 ]]; then
  echo "train on it: perceiver-train --config_file_path configs/main.yaml --dataset_dir $dir"
else
  echo "train on it: perceiver-train --dataset_dir $dir --model M, M a model of $frames frames at ${dim}x$dim"
fi
