#!/usr/bin/python3
"""The tools' command lines as job specs use them (issue 10 item 4): a repeated flag is not an
error, the last one wins (argparse and torchrun semantics), and --help shows every option's type
(INT, FLOAT, BOOL, PATH, ... rather than TEXT for everything) with the default in effect.
perceiver-train's help is checked here too, its config file and options in tests/train/check_trainer.py.
perceiver-prep is the media component's tool: in a build without media it is not there and its
checks are skipped.
Usage: check_cli.py BIN_DIR WORK_DIR"""
import os
import re
import shutil
import subprocess
import sys

BIN, WORK = sys.argv[1:3]
failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        failures.append(what)


def run(tool, *args):
    return subprocess.run([os.path.join(BIN, tool), *map(str, args)], capture_output=True, text=True, cwd=WORK)


# Options that name files or folders, per tool (PATH, or NAME|PATH where a preset name also works).
PATHS = {
    "perceiver-prep": ["--dataset_dir", "--output_dir"],
    "perceiver-eval": ["--checkpoint", "--dataset_dir", "--logdir", "--video", "--model", "--hf-config,--config",
                       "--weights", "--inputs", "--dump"],
    "perceiver-convert": ["--config", "--from", "--to"],
    "perceiver-bench": ["--config"],
    "perceiver-train": ["--config_file_path", "--dataset_dir", "--logdir", "--model"],
}
DEFAULTS = {  # an option and the default its help line must show
    "perceiver-prep": [("--num_frames", "INT=16"), ("--timeout", "FLOAT=60"), ("--split", "=train")],
    "perceiver-eval": [("--threads", "INT in [0 - 4096]=0"), ("--test_batch_size", "INT=the run's"), ("--loss_weights", "=0.03,1,1e-4")],
    "perceiver-bench": [("--steps", "=5"), ("--config", "NAME|PATH=small")],
}


def option_lines(help_text):
    # "  --name TYPE=default    description": the type column ends at two spaces or the line's end.
    return {m.group(1): m.group(2) for m in re.finditer(r"^  (-[-\w,]+) ?(.*?)(?: {2,}|$)", help_text, re.M)}


def built(tool):
    if os.path.exists(os.path.join(BIN, tool)):
        return True
    print(f"skip {tool}: not built (a build without the media component)")
    return False


def case_help():
    for tool, paths in PATHS.items():
        if not built(tool):
            continue
        r = run(tool, "--help")
        opts = option_lines(r.stdout)
        check(r.returncode == 0 and opts, f"{tool} --help lists its options")
        usage = re.search(r"^Usage: (\S*)", r.stdout, re.M)
        check(usage and usage.group(1).endswith(tool), f"{tool} --help names it in its usage line: "
              f"{usage.group(0) if usage else 'none'!r}")
        untyped = [o for o, t in opts.items() if not t and o not in ("-h,--help", "--ffmpeg_logs")]
        check(not untyped, f"{tool}: every option that takes a value shows its type {untyped}")
        for p in paths:
            check(re.match(r"(NAME\|)?PATH\b", opts.get(p, "")), f"{tool} {p}: {opts.get(p)!r} is a PATH, not TEXT")
        for opt, want in DEFAULTS.get(tool, []):
            check(want in opts.get(opt, ""), f"{tool} {opt}: shows {want!r} ({opts.get(opt)!r})")


def case_repeated_flags():
    r = run("perceiver-bench", "--config", "small", "--config", "tiny", "--steps", 3, "--steps", 1, "--warmup", 0,
            "--threads", 1)
    steps = re.findall(r"^step \d+ ", r.stdout, re.M)
    check(r.returncode == 0 and len(steps) == 1 and "config=tiny (" in r.stdout,
          f"perceiver-bench: the last --config and --steps win ({len(steps)} step(s)) {r.stderr.strip()}")
    out = os.path.join(WORK, "synth")
    shutil.rmtree(out, ignore_errors=True)
    if built("perceiver-prep"):
        r = run("perceiver-prep", "synth", "--out", os.path.join(WORK, "elsewhere"), "--out", out, "--classes", 3,
                "--classes", 1, "--clips-per-class", 1)
        check(r.returncode == 0 and "1 classes" in r.stdout and not os.path.exists(os.path.join(WORK, "elsewhere")),
              f"perceiver-prep synth: the last --out and --classes win: {r.stdout.strip()} {r.stderr.strip()}")
    for tool, args in (("perceiver-eval", ["--threads", 1, "--threads", 2]),
                       ("perceiver-convert", ["--config", "tiny", "--config", "tiny", "--from", "/nonexistent",
                                              "--to", "a.h5"])):
        r = run(tool, *args)
        check("At Most" not in r.stderr and "required but received" not in r.stderr,
              f"{tool}: a repeated flag is not a command-line error: {r.stderr.strip()[:200]}")


def case_bounds():
    # An integer option out of range names the option, the bound and the value in one line.
    for opt, value, want in (("--batch_size", 0, "--batch_size: must be 1 or more, got 0"),
                             ("--kv_row_chunk", -3, "--kv_row_chunk: must be 0 or more, got -3"),
                             ("--warmup", "x", "--warmup: 'x' is not an integer"),
                             ("--threads", -1, "--threads: must be 0 or more, got -1")):
        r = run("perceiver-bench", "--config", "tiny", opt, value)
        check(r.returncode != 0 and want in r.stderr and len(r.stderr) < 200,
              f"perceiver-bench {opt} {value}: {want!r} ({r.stderr.strip()[:200]!r})")
    r = run("perceiver-eval", "--threads", -2)
    check(r.returncode != 0 and "--threads: Value -2 not in range 0 to 4096" in r.stderr,
          f"perceiver-eval --threads -2 is refused, naming it: {r.stderr.strip()[:200]!r}")
    # An unknown model names the option it came from (both said "config key 'model'").
    src = os.path.join(WORK, "weights.safetensors")
    open(src, "wb").close()
    for tool, args in (("perceiver-bench", []), ("perceiver-convert", ["--from", src, "--to", os.path.join(WORK, "w.h5")])):
        r = run(tool, "--config", "no_such_preset", *args)
        check(r.returncode != 0 and "--config: 'no_such_preset' is neither a file nor a preset" in r.stderr,
              f"{tool} --config no_such_preset names --config: {r.stderr.strip()[:200]!r}")
    r = run("perceiver-bench", "--config", "tiny", "--steps", 1, "--warmup", 0, "--threads", 1, "--kv_row_chunk", 7)
    check(r.returncode == 0 and "examples_per_s=" in r.stdout,
          f"perceiver-bench --kv_row_chunk 7 runs: {r.stderr.strip()[:200]}")


def case_examples():
    # The example programs: --help, and a bad argument named in one line.
    for tool, bad, want in (("perceiver-quickstart", ["configs/tiny.yaml", "x"],
                             "STEPS 'x': expected a whole number from 1 to 1000000"),
                            ("perceiver-av-autoencoder", ["2.5"], "STEPS '2.5': expected a whole number from 1 to 1000000"),
                            ("perceiver-av-autoencoder", ["10", "-1"], "LEARNING_RATE '-1': expected a number from 0 to 10")):
        if not built(tool):
            continue
        r = run(tool, "--help")
        check(r.returncode == 0 and r.stdout.startswith(f"usage: {tool} "), f"{tool} --help: {r.stdout[:80]!r}")
        r = run(tool, *bad)
        check(r.returncode == 1 and r.stderr.strip() == f"{tool}: error: {want}",
              f"{tool} {' '.join(bad)}: one line naming it: {r.stderr.strip()!r}")


def main():
    os.makedirs(WORK, exist_ok=True)
    case_help()
    case_repeated_flags()
    case_bounds()
    case_examples()
    print(f"check_cli: {len(failures)} failed")
    sys.exit(1 if failures else 0)


main()
