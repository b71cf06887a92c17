#!/usr/bin/python3
"""Offline, strict validation of Kubernetes manifests (no cluster, no network).

    validate_manifests.py --schemas deploy/schemas FILE_OR_DIR...
    validate_manifests.py --schemas deploy/schemas --self-test MANIFEST_DIR

The schemas: deploy/schemas (its README names their sources and versions). Method: YAML parsed
without the timestamp resolver; each document looked up by (apiVersion, kind) in the CRDs
(openAPIV3Schema of every served version, converted to JSON Schema) or in the core/*.json schemas;
`additionalProperties: false` added to every structural object node that lists properties (so a
misspelt field is an error, like kubectl's fieldValidation=Strict); validated with
Draft4Validator. Then semantic checks the schemas cannot express (DEPLOY-NOTES §8).
Exit status 0 when every document is valid; every error is printed with file, document and path.
Needs python3-yaml and python3-jsonschema (Debian).
"""
import argparse
import copy
import glob
import json
import os
import sys

import yaml

try:
    import jsonschema
except ImportError:  # pragma: no cover
    sys.exit("validate_manifests: python3-jsonschema is missing (apt-get install python3-jsonschema)")


# ---------------------------------------------------------------------------------------------
# YAML without timestamps (an unquoted 2024-01-01 must stay a string).
class _Loader(yaml.SafeLoader):
    pass


_Loader.yaml_implicit_resolvers = {
    k: [(tag, rx) for tag, rx in v if tag != "tag:yaml.org,2002:timestamp"]
    for k, v in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


def load_docs(path):
    with open(path) as f:
        return [d for d in yaml.load_all(f, Loader=_Loader) if d is not None]


# ---------------------------------------------------------------------------------------------
# Schema conversion.
KEEP = {"type", "properties", "required", "items", "additionalProperties", "enum", "pattern", "minimum",
        "maximum", "exclusiveMinimum", "exclusiveMaximum", "minLength", "maxLength", "minItems", "maxItems",
        "maxProperties", "minProperties", "anyOf", "allOf", "oneOf", "not", "uniqueItems", "multipleOf"}


def convert(node, structural=True):
    """OpenAPI v3 (CRD) or openapi2jsonschema node → strict Draft 4 JSON Schema node."""
    if isinstance(node, list):
        return [convert(n, structural=False) for n in node]
    if not isinstance(node, dict):
        return node
    out = {}
    for k, v in node.items():
        if k not in KEEP:
            continue
        if k == "properties":
            out[k] = {name: convert(sub, True) for name, sub in v.items()}
        elif k == "items":
            out[k] = convert(v, True) if isinstance(v, dict) else [convert(i, True) for i in v]
        elif k == "additionalProperties":
            out[k] = convert(v, True) if isinstance(v, dict) else v
        elif k in ("anyOf", "allOf", "oneOf"):
            out[k] = [convert(b, structural=False) for b in v]
        elif k == "not":
            out[k] = convert(v, structural=False)
        else:
            out[k] = copy.deepcopy(v)
    if node.get("nullable") is True and "type" in out:
        t = out["type"]
        out["type"] = (t if isinstance(t, list) else [t]) + ["null"]
    if node.get("x-kubernetes-int-or-string") and not any(k in out for k in ("anyOf", "oneOf")):
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    preserve = node.get("x-kubernetes-preserve-unknown-fields") is True
    if node.get("x-kubernetes-embedded-resource"):
        props = out.setdefault("properties", {})
        for f in ("apiVersion", "kind"):
            props.setdefault(f, {"type": "string"})
        props.setdefault("metadata", {"type": "object"})
    # The strictness rule: structural object nodes with properties and no additionalProperties.
    if structural and "properties" in out and "additionalProperties" not in out and not preserve:
        out["additionalProperties"] = False
    return out


class Schemas:
    def __init__(self, root):
        self.root = root
        self.by_gvk = {}
        core_dir, crd_dir = os.path.join(root, "core"), os.path.join(root, "crds")
        for d in (core_dir, crd_dir):
            if not os.path.isdir(d):
                raise SystemExit(f"validate_manifests: schema folder {d} is missing")
        object_meta = None
        for p in sorted(glob.glob(os.path.join(core_dir, "*.json"))):
            with open(p) as f:
                raw = json.load(f)
            raw.pop("$schema", None)
            for gvk in raw.get("x-kubernetes-group-version-kind", []):
                api = gvk["version"] if not gvk["group"] else f"{gvk['group']}/{gvk['version']}"
                self.by_gvk[(api, gvk["kind"])] = (convert(raw), p)
            if os.path.basename(p) == "pod-v1.json":
                object_meta = raw["properties"]["metadata"]
        if object_meta is None:
            raise SystemExit(f"validate_manifests: {core_dir}/pod-v1.json (ObjectMeta) is missing")
        meta = convert(object_meta)
        for p in sorted(glob.glob(os.path.join(crd_dir, "*.yaml"))):
            for crd in load_docs(p):
                if crd.get("kind") != "CustomResourceDefinition":
                    continue
                spec = crd["spec"]
                for ver in spec["versions"]:
                    if not ver.get("served", False):
                        continue
                    api, kind = f"{spec['group']}/{ver['name']}", spec["names"]["kind"]
                    s = convert(ver["schema"]["openAPIV3Schema"])
                    props = s.setdefault("properties", {})
                    props["apiVersion"] = {"type": "string", "enum": [api]}
                    props["kind"] = {"type": "string", "enum": [kind]}
                    props["metadata"] = copy.deepcopy(meta)
                    s.setdefault("required", [])
                    self.by_gvk[(api, kind)] = (s, p)
        for (api, kind), (s, p) in list(self.by_gvk.items()):
            props = s.setdefault("properties", {})
            props["apiVersion"] = {"type": "string", "enum": [api]}
            props["kind"] = {"type": "string", "enum": [kind]}
            req = s.setdefault("required", [])
            for f in ("apiVersion", "kind", "metadata"):
                if f not in req:
                    req.append(f)
        self.validators = {}

    def validator(self, api, kind):
        key = (api, kind)
        if key not in self.by_gvk:
            return None
        if key not in self.validators:
            schema = self.by_gvk[key][0]
            jsonschema.Draft4Validator.check_schema(schema)
            self.validators[key] = jsonschema.Draft4Validator(schema)
        return self.validators[key]


def path_str(p):
    s = ""
    for e in p:
        s += f"[{e}]" if isinstance(e, int) else (("." if s else "") + str(e))
    return s or "(root)"


def schema_errors(schemas, doc):
    api, kind = doc.get("apiVersion"), doc.get("kind")
    v = schemas.validator(api, kind)
    if v is None:
        known = ", ".join(sorted(f"{a}/{k}" for a, k in schemas.by_gvk))
        return [f"no schema for apiVersion={api!r} kind={kind!r} (known: {known})"]
    errs = []
    for e in sorted(v.iter_errors(doc), key=lambda e: list(map(str, e.absolute_path))):
        errs.append(f"{path_str(e.absolute_path)}: {e.message}")
    return errs


# ---------------------------------------------------------------------------------------------
# Semantic checks (DEPLOY-NOTES §8).
def pod_templates(doc):
    """(where, pod spec) for every pod template a document carries."""
    kind, spec = doc.get("kind"), doc.get("spec") or {}
    api = doc.get("apiVersion", "")
    if kind == "Pod":
        yield "spec", spec
    elif kind == "Job" and api == "batch/v1":
        yield "spec.template.spec", (spec.get("template") or {}).get("spec") or {}
    elif kind == "Job" and api.startswith("batch.volcano.sh/"):
        for i, t in enumerate(spec.get("tasks") or []):
            yield f"spec.tasks[{i}].template.spec", (t.get("template") or {}).get("spec") or {}
    elif kind == "MPIJob":
        for name, r in (spec.get("mpiReplicaSpecs") or {}).items():
            yield f"spec.mpiReplicaSpecs.{name}.template.spec", (r.get("template") or {}).get("spec") or {}


ACCEL_RESOURCES = ("nvidia.com/gpu", "aws.amazon.com/neuron", "aws.amazon.com/neuroncore")


def semantic_errors(docs):
    """docs: list of (file, index, doc) over the whole set (pools and pods may be in different files)."""
    errs = []
    pools = [d for _, _, d in docs if d.get("kind") == "NodePool"]
    classes = {(d.get("metadata") or {}).get("name") for _, _, d in docs if d.get("kind") == "EC2NodeClass"}
    for f, i, d in docs:
        where = f"{f} #{i} {d.get('kind')}/{(d.get('metadata') or {}).get('name')}"
        api = str(d.get("apiVersion", ""))
        if api.startswith("karpenter.sh/") and api != "karpenter.sh/v1" or \
                api.startswith("karpenter.k8s.aws/") and api != "karpenter.k8s.aws/v1":
            errs.append(f"{where}: {api} is not served by Karpenter ≥1.1: use karpenter.sh/v1 / karpenter.k8s.aws/v1")
        spec = d.get("spec") or {}
        if d.get("kind") == "NodePool" and classes:
            ref = ((spec.get("template") or {}).get("spec") or {}).get("nodeClassRef") or {}
            if ref.get("name") not in classes:
                errs.append(f"{where}: nodeClassRef {ref.get('name')!r} names no EC2NodeClass in the set")
        if d.get("kind") == "PersistentVolumeClaim" and "ReadWriteMany" not in (spec.get("accessModes") or []):
            errs.append(f"{where}: the shared training volume must be ReadWriteMany")
        if d.get("kind") == "StorageClass" and d.get("provisioner") == "fsx.csi.aws.com" \
                and d.get("reclaimPolicy") != "Retain":
            errs.append(f"{where}: FSx StorageClass must have reclaimPolicy Retain (Delete destroys checkpoints)")
        if d.get("kind") == "Job" and api.startswith("batch.volcano.sh/"):
            tasks = spec.get("tasks") or []
            names = {t.get("name") for t in tasks}
            total = sum(int(t.get("replicas", 0)) for t in tasks)
            if int(spec.get("minAvailable", 0)) > total:
                errs.append(f"{where}: minAvailable {spec.get('minAvailable')} > total replicas {total}")
            plugins = spec.get("plugins") or {}
            if "mpi" in plugins:
                args = dict(a.lstrip("-").split("=", 1) for a in plugins["mpi"] if "=" in a)
                for role, default in (("master", "master"), ("worker", "worker")):
                    if args.get(role, default) not in names:
                        errs.append(f"{where}: mpi plugin --{role}={args.get(role, default)} names no task "
                                    f"(tasks: {sorted(names)})")
                if int(spec.get("minAvailable", 0)) != total:
                    errs.append(f"{where}: mpi gang: minAvailable {spec.get('minAvailable')} should be the whole "
                                f"job ({total}) so mpirun never starts without every worker")
        for pw, ps in pod_templates(d):
            sel = ps.get("nodeSelector") or {}
            tols = ps.get("tolerations") or []
            requests = {}
            for c in (ps.get("containers") or []):
                res = c.get("resources") or {}
                for part in ("requests", "limits"):
                    requests.update(res.get(part) or {})
            if ps.get("restartPolicy") == "Always" and d.get("kind") == "Job":
                errs.append(f"{where} {pw}: a Job's pods cannot have restartPolicy Always")
            if any(r in requests for r in ACCEL_RESOURCES):
                g = ps.get("terminationGracePeriodSeconds", 30)
                if g < 120:
                    errs.append(f"{where} {pw}: terminationGracePeriodSeconds {g} is too short to checkpoint "
                                f"(want ≥ 120)")
            # The pools this pod can land on: their labels must match the selector, their taints be
            # tolerated, their archs allowed.
            if not pools:
                continue
            cands = []
            for p in pools:
                t = (p.get("spec") or {}).get("template") or {}
                labels = (t.get("metadata") or {}).get("labels") or {}
                reqs = (t.get("spec") or {}).get("requirements") or []
                ok = True
                for k, val in sel.items():
                    if k in labels:
                        ok &= labels[k] == val
                    else:
                        r = [q for q in reqs if q.get("key") == k]
                        ok &= not r or any(q.get("operator") == "In" and val in q.get("values", []) for q in r)
                if ok:
                    cands.append(p)
            if sel and not cands:
                errs.append(f"{where} {pw}: nodeSelector {sel} matches no NodePool")
            for p in cands:
                pt = ((p.get("spec") or {}).get("template") or {}).get("spec") or {}
                for taint in pt.get("taints") or []:
                    if not any(tolerates(tol, taint) for tol in tols):
                        errs.append(f"{where} {pw}: selects NodePool {p['metadata']['name']} but does not "
                                    f"tolerate its taint {taint.get('key')}:{taint.get('effect')}")
            for r in ACCEL_RESOURCES:
                if r in requests and not any(r in ((p.get("spec") or {}).get("limits") or {}) for p in cands):
                    errs.append(f"{where} {pw}: requests {r} but no selectable NodePool provides it")
    return errs


def tolerates(tol, taint):
    if tol.get("effect") and tol.get("effect") != taint.get("effect"):
        return False
    if tol.get("operator") == "Exists":
        return not tol.get("key") or tol.get("key") == taint.get("key")
    return tol.get("key") == taint.get("key") and tol.get("value") == taint.get("value")


# ---------------------------------------------------------------------------------------------
def validate_files(schemas, paths, quiet=False):
    files = []
    for p in paths:
        files += sorted(glob.glob(os.path.join(p, "*.yaml"))) if os.path.isdir(p) else [p]
    if not files:
        print("validate_manifests: no manifests given", file=sys.stderr)
        return 1
    n_err, docs = 0, []
    for f in files:
        try:
            ds = load_docs(f)
        except yaml.YAMLError as e:
            print(f"FAIL {f}: YAML syntax: {e}")
            n_err += 1
            continue
        for i, d in enumerate(ds):
            name = f"{d.get('kind')}/{(d.get('metadata') or {}).get('name')}" if isinstance(d, dict) else "?"
            if not isinstance(d, dict):
                print(f"FAIL {f} #{i}: not a mapping")
                n_err += 1
                continue
            errs = schema_errors(schemas, d)
            for e in errs:
                print(f"FAIL {f} #{i} {name}: {e}")
            n_err += len(errs)
            if not errs and not quiet:
                print(f"ok   {os.path.basename(f)} #{i} {d.get('apiVersion')} {name}")
            docs.append((os.path.basename(f), i, d))
    sem = semantic_errors(docs)
    for e in sem:
        print(f"FAIL {e}")
    n_err += len(sem)
    print(f"validate_manifests: {len(docs)} documents in {len(files)} files, {n_err} errors")
    return 1 if n_err else 0


def self_test(schemas, manifests):
    """The validator must reject a misspelt field and a wrong type (at the top and deep inside CRD pod
    templates), an unknown kind and broken semantics, and accept the unmodified documents."""
    files = sorted(glob.glob(os.path.join(manifests, "*.yaml")))
    docs = {os.path.basename(f): load_docs(f) for f in files}
    vc = next(d for ds in docs.values() for d in ds if d["kind"] == "Job" and d["apiVersion"].startswith("batch.volcano"))
    mpi = next(d for ds in docs.values() for d in ds if d["kind"] == "MPIJob")
    pool = next(d for ds in docs.values() for d in ds if d["kind"] == "NodePool")
    pvc = next(d for ds in docs.values() for d in ds if d["kind"] == "PersistentVolumeClaim")
    job = next(d for ds in docs.values() for d in ds if d["kind"] == "Job" and d["apiVersion"] == "batch/v1")

    def mutate(doc, fn):
        d = copy.deepcopy(doc)
        fn(d)
        return d

    def rename(obj, old, new):
        obj[new] = obj.pop(old)

    cases = [  # (description, document, expect errors?)
        ("unmodified Volcano Job", vc, False),
        ("unmodified MPIJob", mpi, False),
        ("unmodified NodePool", pool, False),
        ("misspelt field: Volcano spec.minAvailble",
         mutate(vc, lambda d: rename(d["spec"], "minAvailable", "minAvailble")), True),
        ("misspelt field in a CRD pod template: containers[0].imagee",
         mutate(vc, lambda d: rename(d["spec"]["tasks"][1]["template"]["spec"]["containers"][0], "image", "imagee")),
         True),
        ("misspelt field in metadata: metadata.lables",
         mutate(pool, lambda d: rename(d["metadata"], "labels", "lables")), True),
        ("misspelt field in a core kind: PVC spec.accesModes",
         mutate(pvc, lambda d: rename(d["spec"], "accessModes", "accesModes")), True),
        ("misspelt field in MPIJob: spec.slotPerWorker",
         mutate(mpi, lambda d: rename(d["spec"], "slotsPerWorker", "slotPerWorker")), True),
        ("wrong type: Volcano spec.maxRetry: 'many'",
         mutate(vc, lambda d: d["spec"].__setitem__("maxRetry", "many")), True),
        ("wrong type: NodePool spec.weight: '100'",
         mutate(pool, lambda d: d["spec"].__setitem__("weight", "100")), True),
        ("wrong type: batch Job terminationGracePeriodSeconds: 'long'",
         mutate(job, lambda d: d["spec"]["template"]["spec"].__setitem__("terminationGracePeriodSeconds", "long")),
         True),
        ("wrong type: CRD quantity cpu: 0.5 (float)",
         mutate(vc, lambda d: d["spec"]["tasks"][0]["template"]["spec"]["containers"][0]["resources"]["requests"]
                .__setitem__("cpu", 0.5)), True),
        ("out of range: NodePool weight 101", mutate(pool, lambda d: d["spec"].__setitem__("weight", 101)), True),
        ("bad enum: consolidationPolicy WhenIdle",
         mutate(pool, lambda d: d["spec"]["disruption"].__setitem__("consolidationPolicy", "WhenIdle")), True),
        ("unknown apiVersion: karpenter.sh/v1alpha5",
         mutate(pool, lambda d: d.__setitem__("apiVersion", "karpenter.sh/v1alpha5")), True),
    ]
    failed = 0
    for desc, doc, expect in cases:
        errs = schema_errors(schemas, doc)
        got = bool(errs)
        status = "ok  " if got == expect else "FAIL"
        failed += got != expect
        print(f"{status} {'rejects' if expect else 'accepts'} {desc}" + (f"  → {errs[0]}" if errs else ""))
    # Semantics over the whole set.
    base = [(f, i, d) for f, ds in docs.items() for i, d in enumerate(ds)]
    sem_cases = [
        ("unmodified set", base, False),
        ("worker without the neuron toleration", [(f, i, mutate(d, lambda x: x["spec"]["tasks"][1]["template"]["spec"]
                                                                 .pop("tolerations", None)) if d is vc else d)
                                                  for f, i, d in base], True),
        ("gang smaller than the job", [(f, i, mutate(d, lambda x: x["spec"].__setitem__("minAvailable", 1))
                                        if d is vc else d) for f, i, d in base], True),
        ("ReadWriteOnce claim", [(f, i, mutate(d, lambda x: x["spec"].__setitem__("accessModes", ["ReadWriteOnce"]))
                                  if d is pvc else d) for f, i, d in base], True),
    ]
    for desc, ds, expect in sem_cases:
        errs = semantic_errors(ds)
        got = bool(errs)
        failed += got != expect
        print(f"{'ok  ' if got == expect else 'FAIL'} semantics {'rejects' if expect else 'accepts'} {desc}"
              + (f"  → {errs[0]}" if errs else ""))
    print(f"validate_manifests --self-test: {len(cases) + len(sem_cases) - failed}/{len(cases) + len(sem_cases)} "
          f"cases behave as expected")
    return 1 if failed else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--schemas", required=True, help="k8s-schemas folder (core/ and crds/)")
    ap.add_argument("--self-test", metavar="MANIFEST_DIR",
                    help="mutate the manifests in this folder and check that every mutation is rejected")
    ap.add_argument("-q", "--quiet", action="store_true")
    ap.add_argument("paths", nargs="*")
    a = ap.parse_args()
    if not os.path.isdir(a.schemas):
        print(f"validate_manifests: schema folder {a.schemas} not found (the repository keeps them in "
              f"deploy/schemas)", file=sys.stderr)
        return 2
    schemas = Schemas(a.schemas)
    if a.self_test:
        return self_test(schemas, a.self_test)
    return validate_files(schemas, a.paths, a.quiet)


if __name__ == "__main__":
    sys.exit(main())
