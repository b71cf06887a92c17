#!/usr/bin/python3
"""perceiver-export and perceiver-train --device neuron end to end, against the STAND-IN libnrt
(nrt_standin.cpp: host memory, no device; it proves the protocol, not the hardware):
  - export writes one module per distinct step graph and a manifest whose hashes are the FNV-1a
    of the StableHLO text, and the same flags export the same modules (deterministic);
  - a run finds every module it asks for among the exported ones (stand-in NEFFs made from the
    modules' signatures), executes one graph per step, logs, checkpoints, and resumes;
  - the limits of the device, the missing NEFF and the missing SDK are one clear line each.
Usage: check_neuron_train.py BIN_DIR SOURCE_DIR WORK_DIR STANDIN_LIB"""
import json
import os
import re
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from synthetic_data import make_set  # noqa: E402

BIN, SRC, WORK, STANDIN = sys.argv[1:5]
MODEL = os.path.join(SRC, "tests", "train", "tiny_video.yaml")
DATA = os.path.join(WORK, "kinetics")
BYTES = {"f32": 4, "f64": 8, "i64": 8, "i32": 4, "ui8": 1, "i1": 1}
failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        failures.append(what)


def flags(**extra):
    args = {"model": MODEL, "batch_size": 2, "optimizer": "adamw", "lr": 3e-3, "label_mask_prob": 0.5,
            "init": "deepmind", "config_file_path": os.path.join(WORK, "none.yaml")}
    args.update(extra)
    out = []
    for k, v in args.items():
        out += [f"--{k}", str(v)]
    return out


def run(program, args, env=None):
    return subprocess.run([os.path.join(BIN, program)] + args, capture_output=True, text=True,
                          env=dict(os.environ, **(env or {})))


def fnv1a64(data):
    h = 0xcbf29ce484222325
    for b in data:
        h = ((h ^ b) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


def error_lines(r):
    return [l for l in r.stderr.splitlines() if l.strip()]


def standin_neffs(export_dir, neff_dir):
    """A stand-in "NEFF" per exported module: its inputs and outputs with their byte sizes."""
    os.makedirs(neff_dir, exist_ok=True)
    man = json.load(open(os.path.join(export_dir, "manifest.json")))
    for m in man["modules"]:
        sig = json.load(open(os.path.join(export_dir, m["signature"])))
        lines = ["PCV-NRT-STANDIN"]
        lines += [f"input input{i} {a['elems'] * BYTES[a['dtype']]}" for i, a in enumerate(sig["args"])]
        lines += [f"output output{i} {r['elems'] * BYTES[r['dtype']]}" for i, r in enumerate(sig["results"])]
        with open(os.path.join(neff_dir, m["hash"] + ".neff"), "w") as f:
            f.write("\n".join(lines) + "\n")
    return man


def case_export():
    out = os.path.join(WORK, "export")
    shutil.rmtree(out, ignore_errors=True)
    r = run("perceiver-export", ["--out", out] + flags())
    check(r.returncode == 0, f"perceiver-export runs (exit {r.returncode}) {r.stderr[-300:]}")
    man = json.load(open(os.path.join(out, "manifest.json")))
    hashes = [m["hash"] for m in man["modules"]]
    check(len(hashes) == 2 and len(set(hashes)) == 2, f"two modules: the first step's and the steady one ({hashes})")
    check([s["module"] for s in man["steps"]] == [hashes[0], hashes[1], hashes[1]] and
          man["steady_module"] == hashes[1], "the manifest's stage order: first step, then the steady module")
    for m in man["modules"]:
        text = open(os.path.join(out, m["stablehlo"]), "rb").read()
        check(fnv1a64(text) == m["hash"], f"module {m['hash']}: its name is the FNV-1a of its StableHLO")
        check(text.startswith(b"module") and b"func.func public @main" in text and b"stablehlo.dot_general" in text,
              f"module {m['hash']} is StableHLO text")
        sig = json.load(open(os.path.join(out, m["signature"])))
        aliased = {a["buffer"]: sig["results"][a["alias_result"]]["buffer"] for a in sig["args"] if a["alias_result"] >= 0}
        check(aliased == {"params": "params", "grads": "grads", "exp_avg": "exp_avg", "exp_avg_sq": "exp_avg_sq"},
              f"module {m['hash']}: parameters, gradients and Adam moments are updated in place ({aliased})")
        check(m["updated_in_place"] == 4 and m["arguments"] == len(sig["args"]), "the manifest counts match")
    again = os.path.join(WORK, "export-again")
    shutil.rmtree(again, ignore_errors=True)
    run("perceiver-export", ["--out", again] + flags())
    same = all(open(os.path.join(out, f), "rb").read() == open(os.path.join(again, f), "rb").read()
               for f in os.listdir(out))
    check(same and sorted(os.listdir(out)) == sorted(os.listdir(again)), "the same flags export the same files")
    sgd = os.path.join(WORK, "export-sgd")
    shutil.rmtree(sgd, ignore_errors=True)
    run("perceiver-export", ["--out", sgd] + flags(optimizer="sgd"))
    other = [m["hash"] for m in json.load(open(os.path.join(sgd, "manifest.json")))["modules"]]
    check(not set(other) & set(hashes), "another optimizer exports other modules")
    r = run("perceiver-export", ["--out", out] + flags(grad_accum_usteps=2))
    check(r.returncode != 0 and len(error_lines(r)) == 1 and "grad_accum_usteps" in r.stderr,
          f"export refuses gradient accumulation in one line: {r.stderr.strip()}")
    return out


def neuron_env(neff_dir, log):
    return {"PERCEIVER_LIBNRT": STANDIN, "PERCEIVER_NEFF_DIR": neff_dir, "NRT_STANDIN_LOG": log}


def calls(log):
    return open(log).read().splitlines() if os.path.exists(log) else []


def case_train(export_dir):
    neff_dir = os.path.join(WORK, "neff")
    shutil.rmtree(neff_dir, ignore_errors=True)
    standin_neffs(export_dir, neff_dir)
    logdir = os.path.join(WORK, "run")
    shutil.rmtree(logdir, ignore_errors=True)
    log = os.path.join(WORK, "calls.log")
    if os.path.exists(log):
        os.remove(log)
    train = flags(device="neuron", dataset_dir=DATA, logdir=logdir, num_workers=1, threads=1, log_steps=2,
                  save_steps=3, num_epochs=50)
    r = run("perceiver-train", train + ["--max_steps", "6"], neuron_env(neff_dir, log))
    check(r.returncode == 0, f"perceiver-train --device neuron runs 6 steps on the stand-in (exit {r.returncode}) "
                             f"{r.stderr[-400:]}")
    lines = [l for l in r.stdout.splitlines() if l.startswith("| Training Device=neuron")]
    check(len(lines) == 3, f"three log lines with Device=neuron: {lines[:1]}")
    # The stand-in fills what the host reads back with 42.0: the logged loss came from the
    # "device", not from a computation on the host.
    losses = {re.search(r"Loss=(\S+)", l).group(1) for l in lines}
    check(len(losses) == 1 and float(losses.pop()) > 40, f"the loss is what the stand-in returned: {lines[:1]}")
    c = calls(log)
    check(sum(l.startswith("nrt_execute ") for l in c) == 6, "one execution per step")
    check(sum(l.startswith("nrt_load ") for l in c) == 2, "both exported modules loaded, once each")
    check(c[-1:] == ["nrt_close tensors_left=0 sets_left=0"], f"teardown frees everything and closes: {c[-1:]}")
    ckpts = sorted(os.listdir(os.path.join(logdir, "checkpoints")))
    check("ckpt-00000003.h5" in ckpts and "ckpt-00000006.h5" in ckpts, f"checkpoints at steps 3 and 6: {ckpts}")
    os.remove(log)
    r = run("perceiver-train", train + ["--max_steps", "8"], neuron_env(neff_dir, log))
    c = calls(log)
    check(r.returncode == 0 and "resumed" in r.stdout.lower() and "ckpt-00000008.h5" in
          os.listdir(os.path.join(logdir, "checkpoints")),
          f"--resume auto continues from step 6 to 8 (exit {r.returncode}) {r.stderr[-300:]}")
    check(sum(l.startswith("nrt_execute ") for l in c) == 2, "two more executions after the resume")
    # A resumed process uploads the checkpoint's parameters once, before its first execution.
    first_exec = next(i for i, l in enumerate(c) if l.startswith("nrt_execute "))
    check(sum(l.startswith("nrt_tensor_write name=params ") for l in c[:first_exec]) == 1,
          "the resumed parameters reach the device before the first step")
    return neff_dir, train


def case_errors(neff_dir, train):
    empty = os.path.join(WORK, "neff-empty")
    os.makedirs(empty, exist_ok=True)
    logdir = os.path.join(WORK, "run-missing")
    shutil.rmtree(logdir, ignore_errors=True)
    args = [a if a != os.path.join(WORK, "run") else logdir for a in train]
    r = run("perceiver-train", args + ["--max_steps", "1"], neuron_env(empty, os.path.join(WORK, "missing.log")))
    e = error_lines(r)
    check(r.returncode != 0 and len(e) == 1 and re.search(re.escape(empty) + r"/[0-9a-f]{16}\.neff does not exist", e[0])
          and "perceiver-export --out DIR" in e[0] and "neuronx-cc compile" in e[0],
          f"a missing NEFF is one line naming the file and the commands: {e}")
    r = run("perceiver-train", args + ["--max_steps", "1"],
            {"PERCEIVER_LIBNRT": "/nonexistent/libnrt.so", "PERCEIVER_NEFF_DIR": neff_dir})
    e = error_lines(r)
    check(r.returncode != 0 and len(e) == 1 and "Neuron runtime (libnrt) is not installed" in e[0]
          and "aws-neuronx-runtime-lib" in e[0], f"no SDK: one line naming what is missing and how to get it: {e}")
    for extra, key in ((["--do_eval", "true"], "do_eval"), (["--grad_accum_usteps", "2"], "grad_accum_usteps"),
                       (["--drop_last", "false"], "drop_last")):
        r = run("perceiver-train", args + ["--max_steps", "1"] + extra, neuron_env(neff_dir, os.devnull))
        e = error_lines(r)
        check(r.returncode != 0 and len(e) == 1 and "config key 'device'" in e[0] and key in e[0],
              f"--device neuron with {' '.join(extra)}: one line naming the limit: {e}")
    placeholder = os.path.join(WORK, "placeholder")  # never read: the device is refused first
    open(placeholder, "w").close()
    for program, args2 in (("perceiver-eval", ["--checkpoint", placeholder, "--video", placeholder]),
                           ("perceiver-bench", ["--config", "tiny", "--steps", "1"])):
        r = run(program, args2 + ["--device", "neuron"], neuron_env(neff_dir, os.devnull))
        e = error_lines(r)
        check(r.returncode != 0 and len(e) == 1 and "runs only perceiver-train's compiled training step" in e[0],
              f"{program} --device neuron is refused in one line: {e}")


def main():
    os.makedirs(WORK, exist_ok=True)
    open(os.path.join(WORK, "none.yaml"), "w").close()
    make_set(BIN, DATA, classes=3, clips_per_class=4, num_frames=2, image_dim=16)  # tiny_video's shapes
    export_dir = case_export()
    neff_dir, train = case_train(export_dir)
    case_errors(neff_dir, train)
    print(f"{len(failures)} failure(s)")
    sys.exit(1 if failures else 0)


main()
