"""The small data set the end-to-end scripts train on, in builds with or without media.

With the media component (perceiver-prep in BIN): the synthetic Kinetics set of videos, which the
trainer prepares into shards itself. Without it (PERCEIVER_WITH_MEDIA=OFF): a prepared set of
the same size written directly by make_test_shards (train and validate shards of the given
frames and size), which the trainer reads as it is.
"""
import os
import subprocess


def has_media(bin_dir):
    return os.path.exists(os.path.join(bin_dir, "perceiver-prep"))


def make_set(bin_dir, out, classes=3, clips_per_class=4, num_frames=2, image_dim=16):
    """A Kinetics-layout synthetic set (with media) or its prepared equivalent (without), in out."""
    if has_media(bin_dir):
        if not os.path.exists(os.path.join(out, "annotations", "train.csv")):
            subprocess.run([os.path.join(bin_dir, "perceiver-prep"), "synth", "--out", out, "--classes",
                            str(classes), "--clips-per-class", str(clips_per_class)], check=True,
                           capture_output=True)
    else:
        make_shards(bin_dir, out, classes, clips_per_class, num_frames, image_dim)


def make_shards(bin_dir, out, classes=3, clips_per_class=4, num_frames=2, image_dim=16):
    """Shards of num_frames × image_dim² written directly (no media needed)."""
    if not os.path.exists(os.path.join(out, "skipped_validate.tsv")):
        subprocess.run([os.path.join(bin_dir, "make_test_shards"), out, "--classes", str(classes), "--train",
                        str(clips_per_class), "--val", str(max(1, clips_per_class // 5)), "--num_frames",
                        str(num_frames), "--image_dim", str(image_dim)], check=True, capture_output=True)
