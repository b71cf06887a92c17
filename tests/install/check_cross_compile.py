#!/usr/bin/env python3
"""Compiles the build's C++ files for another architecture (arm64 by default), code and all.

Issue 14 keeps everything x86-specific inside the CPU backend's dispatched kernel tables, so that
an arm64 build for Graviton nodes is not blocked. This check holds the code to that: it takes
every command of the x86-64 build (compile_commands.json), swaps the compiler for a cross
compiler, drops the target flags (-m...) and the optimisation level (-O0: it checks what
compiles, not how fast), and compiles each file into /dev/null. Any error or warning fails it
(aarch64's char is unsigned, say: what is clean on x86 may warn there).

The dependencies' headers are the host's: the arch-specific ones (FFmpeg's, hwloc's generated
config) come from the host's multiarch folder, after the cross compiler's own. Nothing is linked,
so this shows the sources compile, not that an arm64 build links or runs.

  check_cross_compile.py BUILD_DIR [--compiler aarch64-linux-gnu-g++] [--host-multiarch x86_64-linux-gnu]
                         [--exclude REGEX]... [--jobs N]
  check_cross_compile.py --source FILE [--compiler ...]   one file with no flags (the check's own test)
"""
import argparse
import concurrent.futures
import json
import os
import re
import shlex
import subprocess
import sys


def cross_command(args, compiler, multiarch):
    """The build's compile command for one file, for the cross compiler, writing nothing."""
    out, skip = [compiler], False
    for a in args[1:]:
        if skip:
            skip = False
        elif a == "-o":
            skip = True
        elif a == "-c" or a.startswith("-m") or re.fullmatch(r"-O[0-9sgz]?|-Ofast", a):
            continue
        else:
            out.append(a)
    out += ["-O0", "-c", "-o", os.devnull]
    if multiarch:
        out += ["-idirafter", "/usr/include/" + multiarch]
    return out


def compile_one(command, directory):
    r = subprocess.run(command, cwd=directory, capture_output=True, text=True)
    return r.returncode, (r.stdout + r.stderr).strip()


def entries(build_dir, excludes):
    path = os.path.join(build_dir, "compile_commands.json")
    if not os.path.exists(path):
        print(f"skipped: {path} does not exist (a generator without CMAKE_EXPORT_COMPILE_COMMANDS)")
        sys.exit(0)
    with open(path) as f:
        commands = json.load(f)
    keep = []
    for e in commands:
        if not e["file"].endswith((".cpp", ".cc", ".cxx")) or any(re.search(x, e["file"]) for x in excludes):
            continue
        args = shlex.split(e["command"]) if "command" in e else e["arguments"]
        keep.append((e["file"], args, e["directory"]))
    return keep


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("build_dir", nargs="?")
    p.add_argument("--source", help="compile this one file with no flags (no build needed)")
    p.add_argument("--compiler", default="aarch64-linux-gnu-g++")
    p.add_argument("--host-multiarch", default="x86_64-linux-gnu")
    p.add_argument("--exclude", action="append", default=[], help="skip files whose path matches")
    p.add_argument("--jobs", type=int, default=2)
    o = p.parse_args()
    arch = os.path.basename(o.compiler).split("-")[0]
    if o.source:
        files = [(o.source, ["c++", "-std=c++20", "-Wall", "-Wextra", o.source], os.getcwd())]
    elif o.build_dir:
        files = entries(o.build_dir, o.exclude)
    else:
        p.error("give BUILD_DIR or --source")
    failed = 0
    with concurrent.futures.ThreadPoolExecutor(o.jobs) as pool:
        jobs = [(f, pool.submit(compile_one, cross_command(a, o.compiler, o.host_multiarch), d)) for f, a, d in files]
        for f, job in jobs:
            rc, text = job.result()
            if rc != 0 or text:
                failed += 1
                print(f"{f}: does not compile cleanly for {arch} ({o.compiler}, exit {rc}):\n{text}\n")
    if failed:
        print(f"{failed} of {len(files)} files do not compile cleanly for {arch}")
        return 1
    print(f"ok: all {len(files)} files compile for {arch} with {o.compiler}, without a warning")
    return 0


if __name__ == "__main__":
    sys.exit(main())
