#!/usr/bin/env python3
"""deploy/neuron/stablehlo_to_hlo.py on perceiver-export's modules, read back with jaxlib: the
HloModuleProto neuronx-cc takes has the module's parameters (count and shapes) and its in-place
updates as input/output aliases. Run by the xla venv's Python; exit 77 (skip) without it.
Usage: check_hlo_proto.py VENV BIN_DIR SOURCE_DIR WORK_DIR"""
import json
import os
import re
import shutil
import subprocess
import sys

VENV, BIN, SRC, WORK = sys.argv[1:5]
if os.path.exists(VENV + ".unavailable"):
    print("SKIP: " + open(VENV + ".unavailable").read().strip())
    sys.exit(77)
py = os.path.join(VENV, "bin", "python")
failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        failures.append(what)


shutil.rmtree(WORK, ignore_errors=True)
os.makedirs(WORK)
open(os.path.join(WORK, "none.yaml"), "w").close()
subprocess.run([os.path.join(BIN, "perceiver-export"), "--out", WORK, "--model", "tiny", "--batch_size", "2",
                "--optimizer", "lamb", "--config_file_path", os.path.join(WORK, "none.yaml")], check=True)
man = json.load(open(os.path.join(WORK, "manifest.json")))
DT = {"f32": "f32", "f64": "f64", "i64": "s64", "i32": "s32", "ui8": "u8", "i1": "pred"}
for m in man["modules"]:
    pb = os.path.join(WORK, m["hash"] + ".hlo.pb")
    r = subprocess.run([py, os.path.join(SRC, "deploy", "neuron", "stablehlo_to_hlo.py"),
                        os.path.join(WORK, m["stablehlo"]), pb], capture_output=True, text=True)
    check(r.returncode == 0 and os.path.getsize(pb) > 0, f"module {m['hash']} converts ({r.stderr.strip()[-200:]})")
    sig = json.load(open(os.path.join(WORK, m["signature"])))
    text = subprocess.run([py, "-c", "import sys, jaxlib._hlo as H; "
                           "print(H.XlaComputation(open(sys.argv[1], 'rb').read()).as_hlo_text())", pb],
                          capture_output=True, text=True, check=True).stdout
    header = text.splitlines()[0]
    layout = re.search(r"entry_computation_layout=\{\((.*?)\)->", header).group(1)
    params = re.findall(r"(\w+)\[(\d*)\]", layout)
    want = [(DT[a["dtype"]], "" if a["kind"] == "scalar" else str(a["elems"])) for a in sig["args"]]
    check(params == want, f"module {m['hash']}: {len(params)} parameters with the signature's types and sizes")
    aliases = {(int(o), int(i)) for o, i in re.findall(r"\{(\d+)\}: \((\d+), \{\}, may-alias\)", header)}
    want_aliases = {(a["alias_result"], i) for i, a in enumerate(sig["args"]) if a["alias_result"] >= 0}
    check(aliases == want_aliases and len(aliases) >= 4,
          f"module {m['hash']}: in-place updates are input/output aliases ({sorted(aliases)})")
print(f"{len(failures)} failure(s)")
sys.exit(1 if failures else 0)
