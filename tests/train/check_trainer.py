#!/usr/bin/python3
"""End-to-end checks of perceiver-train on a tiny synthetic Kinetics set (issue 5's tests):
config errors name the key; the log line has the seed's format; training lowers the loss; a run
killed with SIGKILL at several points and resumed ends bit-identical to an uninterrupted run;
SIGTERM leaves a checkpoint and exit code 0; k micro-batches equal one batch k times larger;
checkpoint safety (issue 15): a crafted or damaged checkpoint is one clear line (or a skipped
file under --resume auto), a run never deletes its own new checkpoints, --resume never refuses a
folder with checkpoints unless --overwrite, a resume under another seed or with another model is
refused, a finished run run again trains and saves nothing, and a full disk fails the save with exit 1 and the old checkpoint kept; perceiver-eval
evaluates a checkpoint with the model it stores;
config files, flags and presets as a new user meets them; training from videos with a broken
clip; --bind. Without the media component (PERCEIVER_WITH_MEDIA=OFF: no perceiver-prep in BIN)
the set is written as shards directly (tests/synthetic_data.py), the videos case is skipped, and
the no_media case checks that what needs media (videos, evaluation media, a folder to prepare,
perceiver-eval --video) stops before any work with one line.
Usage: check_trainer.py BIN_DIR SOURCE_DIR WORK_DIR [case...]"""
import glob
import os
import re
import shutil
import signal
import subprocess
import sys
import time

import h5py
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from compare import max_abs_diff  # noqa: E402
from synthetic_data import has_media, make_set  # noqa: E402

BIN, SRC, WORK = sys.argv[1:4]
ONLY = set(sys.argv[4:])
MODEL = os.path.join(SRC, "tests", "train", "tiny_video.yaml")
DATA = os.path.join(WORK, "kinetics")
LOG_LINE = re.compile(r"^\| Training Device=cpu Epoch=\d+ Step=\d+ Learning_Rate=\S+ Loss=\d+\.\d{5} "
                      r"Throughput=\S+ Time=\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{6}$")
failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        failures.append(what)


def base_args(logdir, **extra):
    args = {"model": MODEL, "dataset_dir": DATA, "logdir": logdir, "batch_size": 2, "num_epochs": 50,
            "optimizer": "adamw", "lr": 3e-3, "log_steps": 2, "save_steps": 3, "keep_checkpoints": 50,
            "num_workers": 1, "threads": 1, "label_mask_prob": 0.5, "init": "deepmind",
            "config_file_path": os.path.join(WORK, "none.yaml")}
    args.update(extra)
    cmd = [os.path.join(BIN, "perceiver-train")]
    for k, v in args.items():
        cmd += [f"--{k}", str(v)]
    return cmd


def run(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, **kw)


def params_of(ckpt):
    with h5py.File(ckpt) as f:
        return {k: f["params"][k][()] for k in f["params"]}


def newest(logdir):
    d = os.path.join(logdir, "checkpoints")
    names = sorted(n for n in os.listdir(d) if re.fullmatch(r"ckpt-\d+\.h5", n))
    return os.path.join(d, names[-1]) if names else None


def make_data():
    make_set(BIN, DATA, classes=3, clips_per_class=4, num_frames=2, image_dim=16)


def case_config_errors():
    bad = os.path.join(WORK, "bad.yaml")
    with open(bad, "w") as f:
        f.write("batch_size: 2\nlearning_rate: 0.1\n")
    r = run([os.path.join(BIN, "perceiver-train"), "--config_file_path", bad])
    check(r.returncode != 0 and "learning_rate" in r.stderr and bad in r.stderr,
          f"unknown YAML key is refused naming key and file: {r.stderr.strip()}")
    r = run(base_args(os.path.join(WORK, "bad"), batch_size=0))
    check(r.returncode != 0 and "'batch_size'" in r.stderr, f"out-of-range flag names the key: {r.stderr.strip()}")
    r = run(base_args(os.path.join(WORK, "bad"), lr="fast"))
    check(r.returncode != 0 and "'lr'" in r.stderr, f"wrong type names the key: {r.stderr.strip()}")
    r = run(base_args(os.path.join(WORK, "bad"), precision="fp16"))
    check(r.returncode != 0 and "'precision'" in r.stderr and "fp16" in r.stderr,
          f"an unknown precision names the key and value: {r.stderr.strip()}")
    # A CPU without AVX512-BF16 and AMX (here: oneDNN capped below them, our AMX kernel ruled out)
    # refuses bf16 in one line.
    no_bf16 = dict(os.environ, ONEDNN_MAX_CPU_ISA="AVX512_CORE", PERCEIVER_CPU_BF16_GEMM="onednn")
    for flag, value in (("precision", "bf16"), ("enable_autocast", "true")):
        r = run(base_args(os.path.join(WORK, "bad"), **{flag: value}), env=no_bf16)
        check(r.returncode != 0 and r.stderr.count("\n") == 1 and "bf16 is not available" in r.stderr
              and "device 'cpu'" in r.stderr, f"--{flag} {value} on a cpu without bf16: one line: {r.stderr.strip()}")
    a_file = os.path.join(WORK, "a_file")
    open(a_file, "w").close()
    for logdir in (a_file, os.path.join(a_file, "run")):
        r = run(base_args(logdir, max_steps=1))
        check(r.returncode != 0 and "config key 'logdir'" in r.stderr and f"'{a_file}' is a file, not a folder" in r.stderr,
              f"a logdir that is or lies under a file names it: {r.stderr.strip()}")
    r = run(base_args(os.path.join(WORK, "bad"), lr_schedule="cosine", warmup_steps=10, max_steps=5))
    check(r.returncode != 0 and "config key 'warmup_steps' (10)" in r.stderr and "the run has 5 (max_steps)" in r.stderr,
          f"a cosine warm-up as long as the run names warmup_steps and the run's steps: {r.stderr.strip()}")
    check(not os.path.exists(os.path.join(WORK, "bad", "checkpoints")), "a bad config stops before any work")
    shutil.rmtree(os.path.join(WORK, "flags"), ignore_errors=True)
    r = run(base_args(os.path.join(WORK, "flags"), max_steps=1, do_eval="false", resume="never") + ["--drop_last"])
    check(r.returncode == 0 and "do_eval: false" in r.stdout and "drop_last: true" in r.stdout,
          "boolean flags: '--do_eval false' and a bare '--drop_last'")


def case_config_files():
    """Issue 10 items 3, 4 and 6, issue 15's config items: what a new user runs into."""
    train = os.path.join(BIN, "perceiver-train")
    # A repeated flag: the last one wins (job specs append flags, as with argparse and torchrun).
    logdir = os.path.join(WORK, "repeated")
    shutil.rmtree(logdir, ignore_errors=True)
    r = run(base_args(logdir, max_steps=1, resume="never") + ["--threads", "2", "--batch_size", "3", "--do_eval",
                                                               "--do_eval", "false"])
    check(r.returncode == 0 and "\nthreads: 2\n" in r.stdout and "\nbatch_size: 3\n" in r.stdout
          and "\ndo_eval: false\n" in r.stdout, f"a repeated flag: the last one wins {r.stderr[-300:]}")
    # --help: types and the defaults in effect (those of the config file this run would read).
    r = run([train, "--help"], cwd=SRC)
    check(r.returncode == 0 and re.search(r"--threads INT=0 ", r.stdout) and re.search(r"--lr FLOAT=0.001 ", r.stdout)
          and re.search(r"--do_eval BOOL=true ", r.stdout) and re.search(r"--logdir PATH=build/demo/logs\s", r.stdout)
          and "TEXT=build" not in r.stdout and "Defaults shown: built-in, then configs/main.yaml" in r.stdout,
          "--help from the source folder: types, and configs/main.yaml's values as the defaults")
    r = run([train, "--help"], cwd=WORK)
    check(r.returncode == 0 and re.search(r"--lr FLOAT=1e-05 ", r.stdout) and "(no config file read)" in r.stdout,
          "--help elsewhere: the built-in defaults, and that no config file is read")
    # The banner says which config file was read, or that none was.
    for d in ("banner", "banner_none"):
        shutil.rmtree(os.path.join(WORK, d), ignore_errors=True)
    r = run(base_args(os.path.join(WORK, "banner"), max_steps=1, resume="never"))
    check(f"config_file_path: {os.path.join(WORK, 'none.yaml')} (read: " in r.stdout, "the banner names the file read")
    args = [a for a in base_args(os.path.join(WORK, "banner_none"), max_steps=1, resume="never")]
    i = args.index("--config_file_path")
    del args[i:i + 2]
    r = run(args, cwd=WORK)
    check(r.returncode == 0 and f"config_file_path: configs/main.yaml (not found from {WORK}: no config file read"
          in r.stdout, f"the banner says that no config file was read {r.stderr[-300:]}")
    # Presets from outside the source tree: the copies beside the tools (build/share/perceiver/configs).
    logdir = os.path.join(WORK, "preset")
    shutil.rmtree(logdir, ignore_errors=True)
    r = run(base_args(logdir, max_steps=1, model="tiny"), cwd=WORK)
    check(r.returncode == 0 and re.search(r"^model: tiny \(\S*share/perceiver/configs/tiny.yaml\)$", r.stdout, re.M),
          f"--model tiny from {WORK} finds the preset beside the tools and says which file {r.stderr[-300:]}")
    # A model preset given as the trainer config.
    r = run([train, "--config_file_path", os.path.join(SRC, "configs", "tiny.yaml")])
    check(r.returncode != 0 and "this file is a model config" in r.stderr and "pass it as --model" in r.stderr,
          f"a model preset as --config_file_path says so: {r.stderr.strip()}")
    # Strict YAML: a repeated key and a list as a key name the file and line.
    dup = os.path.join(WORK, "dup.yaml")
    with open(dup, "w") as f:
        f.write("batch_size: 2\nlr: 0.1\nbatch_size: 4\n")
    r = run([train, "--config_file_path", dup])
    check(r.returncode != 0 and f"{dup}:3: duplicate key 'batch_size' (first given at line 1)" in r.stderr,
          f"a repeated key is an error: {r.stderr.strip()}")
    with open(dup, "w") as f:
        f.write("lr: 0.1\n[a, b]: 1\n")
    r = run([train, "--config_file_path", dup])
    check(r.returncode != 0 and f"{dup}:2: a key must be a single name, not a list" in r.stderr,
          f"a list as a key names file and line: {r.stderr.strip()}")
    # Integers are range-checked before they are narrowed, and bad values stop before LOGDIR exists.
    bad = os.path.join(WORK, "bad-late")
    shutil.rmtree(bad, ignore_errors=True)
    for key, value, want in (("threads", 4294967297, "'threads' (command line): must be in [0, 4096]"),
                             ("num_workers", 0, "'num_workers' (command line): must be in [1, 256]"),
                             ("kv_row_chunk", -1, "'kv_row_chunk' (command line): must be in [0, 1048576]"),
                             ("dataset_dir", os.path.join(WORK, "nowhere"), "'dataset_dir'"),
                             ("batch_size", 1000, "holds no full batch of 1000"),
                             ("model", "no_such_preset", "'no_such_preset' is neither a file nor a preset")):
        r = run(base_args(bad, **{key: value, "max_steps": 1}))
        check(r.returncode != 0 and want in r.stderr and not os.path.exists(bad),
              f"--{key} {value}: refused before LOGDIR is created: {r.stderr.strip()[-200:]}")


def case_eval_epochs():
    """--eval_epochs n: evaluation after every n-th epoch (the demo trains many short epochs)."""
    logdir = os.path.join(WORK, "eval-epochs")
    shutil.rmtree(logdir, ignore_errors=True)
    r = run(base_args(logdir, max_steps=24, do_eval="true", eval_epochs=2, eval_recon_clips=1, eval_media_clips=0))
    steps = re.findall(r"^\| Evaluation Step=(\d+) ", r.stdout, re.M)
    check(r.returncode == 0 and steps == ["12", "24"],
          f"6 steps per epoch, 4 epochs, --eval_epochs 2: evaluations at steps 12 and 24 only: {steps} {r.stderr[-300:]}")


def case_videos():
    """Issue 10 item 8: training from the videos themselves skips a broken clip, as prep does."""
    if not has_media(BIN):
        print("skip videos: this build has no media component (case no_media checks the refusal)")
        return
    data = os.path.join(WORK, "broken-videos")
    shutil.rmtree(data, ignore_errors=True)
    shutil.copytree(DATA, data, ignore=shutil.ignore_patterns("prepared-*"))
    broken = sorted(glob.glob(os.path.join(data, "train", "*", "*.mp4")))[1]
    with open(broken, "wb") as f:
        f.write(b"not a video")
    logdir = os.path.join(WORK, "videos")
    shutil.rmtree(logdir, ignore_errors=True)
    r = run(base_args(logdir, dataset_dir=data, data_source="videos", max_steps=12, batch_size=2, num_workers=2))
    report = os.path.join(logdir, "skipped_train.tsv")
    rows = open(report).read().splitlines() if os.path.exists(report) else []
    youtube_id = os.path.basename(broken)[:11]
    check(r.returncode == 0 and f"warning: skipped clip {broken}: " in r.stderr
          and "1 unusable clip(s) so far" in r.stderr and "skipped 1 unusable clip(s)" in r.stdout,
          f"a broken clip is skipped and said so, the run finishes: rc {r.returncode} {r.stderr[-400:]}")
    check(r.stderr.count("warning: skipped clip") == 1, "each broken clip is reported once (12 steps = 2 epochs)")
    check(len(rows) == 2 and rows[0] == "youtube_id\ttime_start\ttime_end\treason" and rows[1].startswith(youtube_id),
          f"skipped_train.tsv lists it in prep's format: {rows}")
    check(not os.path.exists(os.path.join(data, "prepared-2x16")), "nothing was prepared")


def case_no_media():
    """Issue 17: with media, the apps' registered component writes evaluation media and decodes
    --video; a build without media trains and evaluates from shards, and what needs media stops
    before any work with one line that says so and how to build with media."""
    train, evaluate = os.path.join(BIN, "perceiver-train"), os.path.join(BIN, "perceiver-eval")
    r = run([train, "--help"], cwd=WORK)
    default = re.search(r"--eval_media_clips INT=(\d+) ", r.stdout)
    want = "2" if has_media(BIN) else "0"
    check(default and default.group(1) == want, f"--help: eval_media_clips defaults to {want} "
          f"({'with' if has_media(BIN) else 'without'} media): {default and default.group(0)}")
    logdir = os.path.join(WORK, "no-media")
    shutil.rmtree(logdir, ignore_errors=True)
    r = run(base_args(logdir, max_steps=6, do_eval="true", eval_recon_clips=1, save_steps=6))
    ckpt = newest(logdir) if os.path.isdir(os.path.join(logdir, "checkpoints")) else None
    if has_media(BIN):  # the registered media component writes evaluation media and decodes --video
        media = sorted(os.path.basename(p) for p in glob.glob(os.path.join(logdir, "eval", "step-6", "clip-0*")))
        check(r.returncode == 0 and media == ["clip-0.mp4", "clip-0.wav", "clip-0_frames.png"],
              f"with media: evaluation writes MP4, WAV and PNG through the media component: {media} {r.stderr[-300:]}")
        clip = sorted(glob.glob(os.path.join(DATA, "val", "*", "*.mp4")))[0]
        r = run([evaluate, "--checkpoint", ckpt, "--video", clip, "--dataset_dir", DATA]) if ckpt else None
        check(r and r.returncode == 0 and "top-3 classes" in r.stdout and "class 00" in r.stdout,
              f"with media: perceiver-eval --video classifies a clip: {r and r.stderr[-300:]}")
        r = run([evaluate, "--checkpoint", ckpt, "--video", clip]) if ckpt else None
        names = re.findall(r"^  \d\. (.*?)\s+p=", r.stdout, re.M) if r else []
        check(r and r.returncode == 0 and names and all(n.startswith("class 0") and " " in n[8:] for n in names),
              f"with media: without --dataset_dir, --video names the classes the checkpoint stores: {names}")
        # A model with more labels than the set has classes (700 on Kinetics-400): only the
        # named classes are ranked; it printed the unnamed labels as 'class 4' among them.
        wide = os.path.join(WORK, "tiny_video_5_labels.yaml")
        with open(wide, "w") as f:
            f.write(open(MODEL).read().replace("num_labels: 3", "num_labels: 5"))
        wide_logdir = os.path.join(WORK, "wide-labels")
        shutil.rmtree(wide_logdir, ignore_errors=True)
        r = run(base_args(wide_logdir, model=wide, max_steps=3, do_eval="false", save_steps=3))
        ckpt = newest(wide_logdir) if r.returncode == 0 else None
        r = run([evaluate, "--checkpoint", ckpt, "--video", clip]) if ckpt else None
        names = re.findall(r"^  \d\. (.*?)\s+p=", r.stdout, re.M) if r else []
        check(r and r.returncode == 0 and "top-3 classes" in r.stdout and len(names) == 3
              and sorted(names) == sorted(os.listdir(os.path.join(DATA, "train")))
              and "(2 of the model's 5 labels have no class in the training set and are not ranked" in r.stdout,
              f"with media: a 5-label model trained on 3 classes ranks only those 3: "
              f"{r and r.stdout[-500:]} {r and r.stderr[-300:]}")
        print("skip the refusals of no_media: this build has the media component")
        return
    check(r.returncode == 0 and "| Evaluation Step=6 " in r.stdout and ckpt and
          os.path.exists(os.path.join(logdir, "eval.json")) and not glob.glob(os.path.join(logdir, "eval", "*", "*.mp4")),
          f"trains and evaluates from shards, no media written: rc {r.returncode} {r.stderr[-300:]}")
    if ckpt:
        r = run([evaluate, "--checkpoint", ckpt, "--dataset_dir", DATA, "--logdir", os.path.join(WORK, "no-media-eval")])
        check(r.returncode == 0 and "top-1" in r.stdout and "no media" in r.stdout,
              f"perceiver-eval evaluates the checkpoint from shards (its eval_media_clips not a request): "
              f"rc {r.returncode} {r.stderr[-300:]}")
    kinetics = os.path.join(WORK, "unprepared")
    os.makedirs(os.path.join(kinetics, "annotations"), exist_ok=True)
    with open(os.path.join(kinetics, "annotations", "train.csv"), "w") as f:
        f.write("label,youtube_id,time_start,time_end,split\nx,abcdefghijk,0,10,train\n")
    refused = os.path.join(WORK, "refused")
    shutil.rmtree(refused, ignore_errors=True)
    cases = [("data_source videos", base_args(refused, data_source="videos", max_steps=1), "'data_source' is 'videos'"),
             ("eval_media_clips 2", base_args(refused, do_eval="true", eval_media_clips=2, max_steps=1),
              "'eval_media_clips' is 2"),
             ("an unprepared Kinetics folder", base_args(refused, dataset_dir=kinetics, max_steps=1),
              "split is not prepared")]
    if ckpt:
        cases += [("perceiver-eval --video", [evaluate, "--checkpoint", ckpt, "--video", ckpt], "--video"),
                  ("perceiver-eval --eval_media_clips 1",
                   [evaluate, "--checkpoint", ckpt, "--dataset_dir", DATA, "--eval_media_clips", "1"], "--eval_media_clips 1"),
                  ("perceiver-eval on an unprepared folder", [evaluate, "--checkpoint", ckpt, "--dataset_dir", kinetics],
                   "split is not prepared")]
    for what, cmd, names in cases:
        r = run(cmd, cwd=WORK)
        out = (r.stdout + r.stderr).strip().splitlines()
        check(r.returncode == 1 and len(out) == 1 and names in out[0] and "no media support" in out[0]
              and "-DPERCEIVER_WITH_MEDIA=ON" in out[0] and not os.path.exists(refused),
              f"{what}: stops before any work with one line: rc {r.returncode} {out}")


def case_bind():
    """Issue 10 item 9: --bind puts compute and loader threads on separate cores, said at start."""
    logdir = os.path.join(WORK, "bind")
    shutil.rmtree(logdir, ignore_errors=True)
    r = run(base_args(logdir, max_steps=2, threads=0, num_workers=1) + ["--bind"])
    cores = os.cpu_count()
    line = next((l for l in r.stdout.splitlines() if l.startswith("binding: ")), "")
    if cores >= 2:
        want = re.search(r"binding: (\d+) compute thread\(s\): .*compute thread 0 -> core L#0.*; loader threads \(1\) "
                         r"on core\(s\) L#(\d+)$", line)
        check(r.returncode == 0 and want and int(want.group(1)) == cores - 1 and int(want.group(2)) == cores - 1,
              f"--bind: {cores - 1} compute thread(s) and the loader on the last core: {line!r} {r.stderr[-200:]}")
    else:
        check(r.returncode == 0 and "(one core: shared)" in line, f"--bind on one core says it shares: {line!r}")


def case_train_and_log():
    logdir = os.path.join(WORK, "plain")
    shutil.rmtree(logdir, ignore_errors=True)
    r = run(base_args(logdir, max_steps=40, log_steps=4))
    check(r.returncode == 0, f"training runs (exit {r.returncode}) {r.stderr[-300:]}")
    lines = [l for l in r.stdout.splitlines() if l.startswith("| Training")]
    check(len(lines) == 10 and all(LOG_LINE.match(l) for l in lines), f"log lines match the seed's format: {lines[:1]}")
    losses = [float(re.search(r"Loss=(\S+)", l).group(1)) for l in lines] or [0.0]
    check(losses[-1] < 0.8 * losses[0], f"loss falls: {losses[0]:.4f} -> {losses[-1]:.4f}")
    check("--------TRAINING CONFIG----------" in r.stdout, "config block printed")
    for name in ("config.yaml", "metrics.jsonl", "rank0.json"):
        check(os.path.exists(os.path.join(logdir, name)), f"{name} written")
    check(any(n.startswith("events.out.tfevents.") for n in os.listdir(logdir)), "TensorBoard event file written")


def reference_params(steps):
    logdir = os.path.join(WORK, "reference")
    shutil.rmtree(logdir, ignore_errors=True)  # never reuse a run made by an older build
    subprocess.run(base_args(logdir, max_steps=steps, save_steps=7), check=True, capture_output=True)
    return params_of(os.path.join(logdir, "checkpoints", f"ckpt-{steps:08d}.h5"))


def case_kill_and_resume():
    steps = 300
    want = reference_params(steps)
    # Kill points tied to progress, not wall time: just after checkpoint k appears, plus a little.
    for after_step, delay in ((14, 0.0), (70, 0.004), (140, 0.012)):
        logdir = os.path.join(WORK, f"killed-{after_step}")
        shutil.rmtree(logdir, ignore_errors=True)
        p = subprocess.Popen(base_args(logdir, max_steps=steps, save_steps=7), stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
        marker = os.path.join(logdir, "checkpoints", f"ckpt-{after_step:08d}.h5")
        deadline = time.time() + 120
        while not os.path.exists(marker) and p.poll() is None and time.time() < deadline:
            time.sleep(0.001)
        time.sleep(delay)
        p.send_signal(signal.SIGKILL)
        p.wait()
        killed_at = newest(logdir)
        finished = killed_at is not None and killed_at.endswith(f"ckpt-{steps:08d}.h5")
        check(p.returncode == -signal.SIGKILL and not finished, f"run killed mid-training after step {after_step}")
        r = run(base_args(logdir, max_steps=steps, save_steps=7))
        got = params_of(os.path.join(logdir, "checkpoints", f"ckpt-{steps:08d}.h5"))
        same = r.returncode == 0 and got.keys() == want.keys() and all(np.array_equal(got[k], want[k]) for k in want)
        check(same, f"SIGKILL after step {after_step} + {delay * 1000:.0f} ms (newest checkpoint "
                    f"{os.path.basename(killed_at or 'none')}) + --resume auto is bit-identical")


def case_sigterm():
    logdir = os.path.join(WORK, "sigterm")
    shutil.rmtree(logdir, ignore_errors=True)
    p = subprocess.Popen(base_args(logdir, max_steps=100000, save_steps=0), stdout=subprocess.PIPE, text=True)
    for line in p.stdout:
        if line.startswith("| Training"):
            break
    p.send_signal(signal.SIGTERM)
    out, _ = p.communicate(timeout=120)
    ckpt = newest(logdir)
    check(p.returncode == 0 and ckpt is not None and "stop requested" in out,
          f"SIGTERM: exit {p.returncode}, checkpoint {ckpt and os.path.basename(ckpt)}")


def ckpt_path(logdir, step):
    return os.path.join(logdir, "checkpoints", f"ckpt-{step:08d}.h5")


def fresh_run(name, **extra):
    """A finished 6-step run with checkpoints at steps 3 and 6."""
    logdir = os.path.join(WORK, name)
    shutil.rmtree(logdir, ignore_errors=True)
    subprocess.run(base_args(logdir, max_steps=6, **extra), check=True, capture_output=True)
    return logdir


def error_lines(r):
    return [l for l in r.stderr.splitlines() if l.strip()]


def case_crafted_checkpoint():
    logdir = fresh_run("crafted")
    newest = ckpt_path(logdir, 6)
    with h5py.File(newest, "r+") as f:  # an array where one integer belongs (was SIGSEGV)
        del f.attrs["step"]
        f.attrs["step"] = np.arange(4000, dtype=np.int64)
    want = f"{newest}: attribute 'step' on '/' must be one integer, found 4000 integers"
    r = run(base_args(logdir, max_steps=9, resume=newest))
    check(r.returncode == 1 and len(error_lines(r)) == 1 and want in r.stderr,
          f"--resume CRAFTED: exit {r.returncode}, one line: {r.stderr.strip()}")
    r = run([os.path.join(BIN, "perceiver-eval"), "--checkpoint", newest, "--dataset_dir", DATA])
    check(r.returncode == 1 and len(error_lines(r)) == 1 and "4000 integers" in r.stderr,
          f"perceiver-eval --checkpoint CRAFTED: exit {r.returncode}, one line: {r.stderr.strip()}")
    r = run(base_args(logdir, max_steps=9))
    check(r.returncode == 0 and "skipping checkpoint" in r.stderr and want in r.stderr and
          f"resumed from {ckpt_path(logdir, 3)}" in r.stdout and os.path.exists(ckpt_path(logdir, 9)),
          f"--resume auto skips the crafted newest with one warning and continues from step 3 (exit {r.returncode})")


def case_flipped_bits():
    logdir = fresh_run("flipped")
    newest = ckpt_path(logdir, 6)
    name = "perceiver.embeddings.latents"
    with h5py.File(newest, "r") as f:
        ds = f["params"][name]
        offset = ds.id.get_chunk_info(0).byte_offset
    with open(newest, "r+b") as f:  # the lowest mantissa bit of element 1: still finite
        f.seek(offset + 4)
        b = f.read(1)
        f.seek(offset + 4)
        f.write(bytes([b[0] ^ 1]))
    r = run(base_args(logdir, max_steps=9))
    check(r.returncode == 0 and f"/params/{name}" in r.stderr and "Fletcher32" in r.stderr and
          f"resumed from {ckpt_path(logdir, 3)}" in r.stdout,
          f"a flipped bit fails the tensor's checksum, named; resume continues from step 3: {r.stderr.strip()[-300:]}")


def case_pruning_keeps_own_checkpoints():
    logdir = os.path.join(WORK, "pruning")
    shutil.rmtree(logdir, ignore_errors=True)
    os.makedirs(os.path.join(logdir, "checkpoints"))
    with open(ckpt_path(logdir, 99999999), "w") as f:  # an unreadable "newest", skipped by resume
        f.write("not a checkpoint")
    r = run(base_args(logdir, max_steps=6, keep_checkpoints=1))
    left = sorted(os.listdir(os.path.join(logdir, "checkpoints")))
    check(r.returncode == 0 and left == ["ckpt-00000006.h5", "ckpt-99999999.h5"],
          f"keep_checkpoints 1 keeps the run's own newest checkpoint beside a higher stale one: {left}")


def case_resume_never_and_seed():
    logdir = fresh_run("never")
    with open(os.path.join(logdir, "config.yaml")) as f:
        config_before = f.read()
    r = run(base_args(logdir, max_steps=3, resume="never", lr=0.5))
    check(r.returncode == 1 and "ckpt-00000006.h5, ckpt-00000003.h5" in r.stderr and "--overwrite" in r.stderr,
          f"--resume never into a folder with checkpoints is refused, naming them: {r.stderr.strip()}")
    with open(os.path.join(logdir, "config.yaml")) as f:
        check(f.read() == config_before, "the refused run left config.yaml as it was")
    r = run(base_args(logdir, max_steps=9, seed=5))
    check(r.returncode == 1 and "--seed 0" in r.stderr and "--seed 5" in r.stderr and
          not os.path.exists(ckpt_path(logdir, 9)),
          f"resume under another seed is refused naming both: {r.stderr.strip()}")
    r = run(base_args(logdir, max_steps=3, resume="never", overwrite="true"))
    left = sorted(os.listdir(os.path.join(logdir, "checkpoints")))
    check(r.returncode == 0 and "--overwrite: deleted" in r.stdout and left == ["ckpt-00000003.h5"],
          f"--overwrite starts afresh: {left}")


def case_resume_finished_run():
    """The same command again after a run has ended: nothing is trained or saved (its last
    checkpoint keeps its bytes and time), and the last line says so; a longer max_steps continues."""
    logdir = fresh_run("finished", do_eval="false")
    last = ckpt_path(logdir, 6)
    before = os.stat(last)
    r = run(base_args(logdir, max_steps=6, do_eval="false"))
    after = os.stat(last)
    check(r.returncode == 0 and "resumed from" in r.stdout and "saved checkpoint" not in r.stdout
          and "the run had ended at step 6 already, nothing left to train" in r.stdout
          and (after.st_mtime_ns, after.st_size) == (before.st_mtime_ns, before.st_size),
          f"a finished run run again trains and saves nothing (exit {r.returncode}): {r.stdout.strip()[-300:]}")
    r = run(base_args(logdir, max_steps=8, do_eval="false"))
    check(r.returncode == 0 and os.path.exists(ckpt_path(logdir, 8)) and "training done: 8 steps" in r.stdout,
          f"a longer max_steps continues it to step 8 (exit {r.returncode}): {r.stdout.strip()[-200:]}")
    a_file = os.path.join(WORK, "a_file")
    open(a_file, "w").close()
    r = run([os.path.join(BIN, "perceiver-eval"), "--checkpoint", ckpt_path(logdir, 8), "--dataset_dir", DATA,
             "--logdir", a_file])
    check(r.returncode != 0 and f"--logdir '{a_file}' is a file, not a folder" in r.stderr,
          f"perceiver-eval --logdir that is a file is refused naming it: {r.stderr.strip()}")


def case_model_changed():
    """A resume whose model differs from the checkpoint's (same shapes: the weights would load) is
    refused naming the key; perceiver-eval evaluates a checkpoint with the model it stores."""
    logdir = fresh_run("model_changed")
    with open(MODEL) as f:
        text = f.read()
    edited = os.path.join(WORK, "tiny_video_edited.yaml")
    with open(edited, "w") as f:
        f.write(text.replace("image_fourier_max_resolution: [2, 4, 4]", "image_fourier_max_resolution: [2, 8, 8]"))
    r = run(base_args(logdir, max_steps=9, model=edited))
    check(r.returncode == 1 and "image_fourier_max_resolution: [2, 4, 4] vs [2, 8, 8]" in r.stderr and
          "another model" in r.stderr and not os.path.exists(ckpt_path(logdir, 9)),
          f"a resume with an edited model (shapes kept) is refused naming the key: {r.stderr.strip()[-400:]}")
    r = run(base_args(logdir, max_steps=9))
    check(r.returncode == 0 and os.path.exists(ckpt_path(logdir, 9)), "the same run resumes with its own model")
    # perceiver-eval reads the checkpoint's own model, not the (edited) file its config names.
    shutil.copy(edited, os.path.join(WORK, "moving_model.yaml"))
    moved = fresh_run("model_stored", model=os.path.join(WORK, "moving_model.yaml"))
    with open(os.path.join(WORK, "moving_model.yaml"), "w") as f:
        f.write(text)  # the file changes after training: [2, 4, 4] again
    evaluate = [os.path.join(BIN, "perceiver-eval"), "--checkpoint", ckpt_path(moved, 6), "--dataset_dir", DATA,
                "--logdir", os.path.join(WORK, "model_stored_eval"), "--eval_media_clips", "0", "--threads", "1"]
    r = run(evaluate)
    check(r.returncode == 0 and "as stored in the checkpoint" in r.stdout and "warning" not in r.stderr,
          f"perceiver-eval uses the model stored in the checkpoint: {r.stdout[-300:]} {r.stderr[-300:]}")
    r = run(evaluate + ["--model", os.path.join(WORK, "moving_model.yaml")])
    check(r.returncode == 0 and "image_fourier_max_resolution: [2, 8, 8] vs [2, 4, 4]" in r.stderr,
          f"perceiver-eval --model names where it differs from the stored model: {r.stderr[-300:]}")


def limit_file_size():
    import resource  # noqa: PLC0415 (only in the child)
    resource.setrlimit(resource.RLIMIT_FSIZE, (200 << 10, 200 << 10))


def case_full_disk():
    logdir = fresh_run("full")
    with open(ckpt_path(logdir, 6), "rb") as f:
        before = f.read()
    # SIGXFSZ ignored (as Python does for itself), so writes past the limit fail with EFBIG like
    # writes to a full disk fail with ENOSPC.
    r = subprocess.run(base_args(logdir, max_steps=9), capture_output=True, text=True, preexec_fn=limit_file_size,
                       restore_signals=False)
    with open(ckpt_path(logdir, 6), "rb") as f:
        kept = f.read() == before
    check(r.returncode == 1 and "File too large" in r.stderr and kept and not os.path.exists(ckpt_path(logdir, 9)),
          f"a save on a full disk: exit {r.returncode} (was 139), old checkpoint kept: {r.stderr.strip()[-200:]}")


def case_grad_accum():
    a, b = os.path.join(WORK, "accum1"), os.path.join(WORK, "accum2")
    for d in (a, b):
        shutil.rmtree(d, ignore_errors=True)
    subprocess.run(base_args(a, max_steps=2, batch_size=4, optimizer="sgd", lr=0.05), check=True, capture_output=True)
    subprocess.run(base_args(b, max_steps=2, batch_size=2, grad_accum_usteps=2, optimizer="sgd", lr=0.05),
                   check=True, capture_output=True)
    pa, pb = params_of(newest(a)), params_of(newest(b))
    worst = max_abs_diff(pa, pb)
    check(worst < 1e-6, f"2 micro-batches of 2 equal one batch of 4 (max param diff {worst:.2e})")


def case_adam_betas():
    """adam_beta1/adam_beta2 reach the optimizer; out-of-range values are refused naming the key."""
    r = run(base_args(os.path.join(WORK, "bad"), adam_beta2=1.0))
    check(r.returncode != 0 and "'adam_beta2'" in r.stderr, f"adam_beta2 1.0 is refused: {r.stderr.strip()}")
    runs = {}
    for name, extra in (("betas_default", {}), ("betas_0999", {"adam_beta1": 0.9, "adam_beta2": 0.999}),
                        ("betas_095", {"adam_beta2": 0.95}), ("betas_b1", {"adam_beta1": 0.5})):
        d = os.path.join(WORK, name)
        shutil.rmtree(d, ignore_errors=True)
        subprocess.run(base_args(d, max_steps=3, **extra), check=True, capture_output=True)
        runs[name] = params_of(newest(d))
    check(max_abs_diff(runs["betas_default"], runs["betas_0999"]) == 0, "the default betas are 0.9 and 0.999 (torch's)")
    for name in ("betas_095", "betas_b1"):
        worst = max_abs_diff(runs["betas_default"], runs[name])
        check(worst > 1e-5, f"{name}: other betas give other parameters after 3 steps (max diff {worst:.2e})")


def main():
    os.makedirs(WORK, exist_ok=True)
    open(os.path.join(WORK, "none.yaml"), "w").close()  # no config file defaults: flags only
    make_data()
    cases = {"config_errors": case_config_errors, "config_files": case_config_files, "eval_epochs": case_eval_epochs,
             "videos": case_videos, "no_media": case_no_media, "bind": case_bind, "train_and_log": case_train_and_log,
             "kill_and_resume": case_kill_and_resume, "sigterm": case_sigterm, "grad_accum": case_grad_accum,
             "crafted_checkpoint": case_crafted_checkpoint, "flipped_bits": case_flipped_bits,
             "pruning": case_pruning_keeps_own_checkpoints, "resume_never_and_seed": case_resume_never_and_seed,
             "resume_finished_run": case_resume_finished_run,
             "full_disk": case_full_disk, "model_changed": case_model_changed, "adam_betas": case_adam_betas}
    for name, fn in cases.items():
        if not ONLY or name in ONLY:
            fn()
    print(f"check_trainer: {len(failures)} failed")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
