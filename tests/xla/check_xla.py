#!/usr/bin/env python3
"""Runs captured training steps with the real XLA compiler (jaxlib, CPU) and compares them with
the cpu backend.

DIR (written by xla_dump) holds stepK.mlir + stepK.json per step, the bytes of every input and
initial state, the reference results ref.*.bin and run.json (the steps, the expectations, the
parameter registry). Each step's module is compiled from its StableHLO text by XLA, its state
arguments are fed from the previous step's results (by buffer), and the host reads and final
parameters are compared per tensor with |got - ref| <= atol*max(1, max|ref|) + rtol*|ref|
(the PyTorch parity tests' rule and tolerances). Every step's HloModuleProto is produced too
(what neuronx-cc compiles), so that conversion is tested as well.

Exit 0: every comparison within tolerance; 1: a mismatch or an error.
"""
import argparse
import json
import os
import sys

import numpy as np

DTYPES = {"f32": np.float32, "f64": np.float64, "i64": np.int64, "ui8": np.uint8, "i32": np.int32}


def load_jax():
    import jax
    jax.config.update("jax_enable_x64", True)  # f64 and i64 arguments stay what they are
    from jax._src.lib import xla_client as xc
    return jax, xc


def compile_module(jax, xc, text):
    dev = jax.devices("cpu")[0]
    exe = dev.client.compile_and_load(text, xc.DeviceList((dev,)), xc.CompileOptions())
    proto = xc._xla.mlir.mlir_module_to_xla_computation(text, use_tuple_args=False, return_tuple=True)
    return exe, len(proto.as_serialized_hlo_module_proto())


def read(dirname, name, dtype):
    return np.fromfile(os.path.join(dirname, name), dtype=DTYPES[dtype])


def run_steps(jax, xc, d, run):
    """Executes every step; returns the host reads per step and the buffers' final values."""
    dev = jax.devices("cpu")[0]
    buffers = {}  # buffer id -> its current value (numpy)
    reads = []
    compiled = {}  # module hash -> (executable, proto size): the steady-state step is one module
    for stem in run["steps"]:
        man = json.load(open(os.path.join(d, stem + ".json")))
        text = open(os.path.join(d, man["module"])).read()
        if man["hash"] not in compiled:
            compiled[man["hash"]] = compile_module(jax, xc, text)
        exe, proto_bytes = compiled[man["hash"]]
        args = []
        for a in man["args"]:
            if a["kind"] == "scalar":
                args.append(np.array(a["value"], dtype=np.float64))
            elif a["kind"] == "input":
                args.append(read(d, a["file"], a["dtype"]))
            else:
                # First use, or the host wrote it since (the batch): its bytes at the region's start.
                if a["buffer_id"] not in buffers or a["host_written"]:
                    buffers[a["buffer_id"]] = read(d, a["file"], a["dtype"])
                args.append(buffers[a["buffer_id"]])
        outs = exe.execute([jax.device_put(x, dev) for x in args])
        step_reads = []
        for r, v in zip(man["results"], outs):
            v = np.asarray(v)
            if r["kind"] == "state":
                buffers[r["buffer_id"]] = v
            else:
                step_reads.append(v)
        reads.append((man, step_reads))
        print(f"{stem}: module {man['hash']} run by XLA ({man['ops']} ops, {len(man['args'])} arguments, "
              f"{len(man['results'])} results; HloModuleProto {proto_bytes} bytes)")
    return reads, buffers


def compare(label, got, ref, atol, rtol):
    """The parity rule; prints one line; True when within tolerance."""
    got = np.asarray(got, dtype=np.float64).ravel()
    ref = np.asarray(ref, dtype=np.float64).ravel()
    if got.shape != ref.shape:
        print(f"FAIL {label}: {got.size} values, reference has {ref.size}")
        return False
    scale = max(1.0, float(np.max(np.abs(ref)))) if ref.size else 1.0
    allowed = atol * scale + rtol * np.abs(ref)
    diff = np.abs(got - ref)
    bad = int(np.sum(~(diff <= allowed)))
    worst = int(np.argmax(diff / allowed)) if ref.size else 0
    frac = float(diff[worst] / allowed[worst]) if ref.size else 0.0
    status = "ok  " if bad == 0 else "FAIL"
    if bad or os.environ.get("CHECK_XLA_VERBOSE"):
        print(f"{status} {label}: {bad} of {ref.size} out of tolerance; worst [{worst}] got {got[worst]:.8g} "
              f"want {ref[worst]:.8g} ({frac:.3f} of the tolerance)")
    return bad == 0, frac


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dir")
    ap.add_argument("--atol", type=float, default=1e-5)
    ap.add_argument("--rtol", type=float, default=1e-4)
    a = ap.parse_args()
    jax, xc = load_jax()
    run = json.load(open(os.path.join(a.dir, "run.json")))
    reads, buffers = run_steps(jax, xc, a.dir, run)
    failures, checked, worst = 0, 0, 0.0
    for e in run["expect"]:
        man, step_reads = reads[e["step"]]
        if "state" in e:
            bid = next(r["buffer_id"] for r in man["results"] if r["kind"] == "state" and r["buffer"] == e["state"])
            got = buffers[bid]
        else:
            got = step_reads[e["read"]]
        ref = read(a.dir, e["file"], e["dtype"])
        if e["split"] == "params":
            parts = [(f"{e['label']}: {p['name']}", got[p["offset"]:p["offset"] + p["elems"]],
                      ref[p["offset"]:p["offset"] + p["elems"]]) for p in run["params"]]
        elif e["dtype"] == "f64":  # [image, audio, label, sum of squared gradients, clipped]
            parts = [(f"{e['label']} [{i}]", got[i:i + 1], ref[i:i + 1]) for i in range(len(ref))]
        else:
            parts = [(e["label"], got, ref)]
        for label, g, r in parts:
            ok, frac = compare(label, g, r, a.atol, a.rtol)
            failures += not ok
            checked += 1
            worst = max(worst, frac)
    print(f"{checked - failures} passed, {failures} failed (tensors compared with atol {a.atol:g}, rtol {a.rtol:g}; "
          f"worst element at {worst:.3f} of its tolerance)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
