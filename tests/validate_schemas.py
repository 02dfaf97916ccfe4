#!/usr/bin/python3
"""Validate plancc's JSON Schemas and the files that must follow them.

usage: /usr/bin/python3 tests/validate_schemas.py [REPO_ROOT]

REPO_ROOT defaults to the parent of this file's folder. Checks, one output line each:
  - schemas/model.schema.json, cluster.schema.json and policy.schema.json are valid JSON Schema 2020-12;
  - the operator types and their input/output counts in model.schema.json agree with the USER
    rows of runtime/ops.def;
  - every models/*.json follows model.schema.json, and every models/clusters/*.json follows
    cluster.schema.json and names a source for each of its figures, and every
    models/policies/*.json follows policy.schema.json;
  - every tests/schema_good/*.json is accepted (cluster-* by the cluster schema, the rest by the
    model schema);
  - every tests/schema_bad/*.json is rejected by its schema: model-* by the model schema,
    cluster-* by the cluster schema, policy-* by the policy schema (so the checks are shown not to
    be vacuous).
Every file must be well-formed JSON without duplicate keys (plancc's loader refuses those too).

Ends with "N passed, M failed"; exits 0 if nothing failed, 1 otherwise, and 77 (meson's "skip")
when the jsonschema module is missing. Needs python3-jsonschema >= 4 (Debian's /usr/bin/python3).
"""

import glob
import json
import os
import re
import sys

try:
    import jsonschema
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import best_match
except ImportError as e:  # pragma: no cover - depends on the machine
    print(f"validate_schemas: skipped: cannot import jsonschema with Draft 2020-12 support ({e}); "
          "install python3-jsonschema (tools/setup.sh) and run with /usr/bin/python3", file=sys.stderr)
    sys.exit(77)

passed = 0
failed = 0


def report(ok, what, detail=""):
    global passed, failed
    if ok:
        passed += 1
    else:
        failed += 1
    print(f"{'ok  ' if ok else 'FAIL'} {what}{': ' + detail if detail else ''}", flush=True)


class JSONFault(Exception):
    pass


def _no_duplicates(pairs):
    obj = {}
    for k, v in pairs:
        if k in obj:
            raise JSONFault(f"duplicate key {k!r}")
        obj[k] = v
    return obj


def load_json(path):
    """The parsed document, or raises JSONFault with a message."""
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f, object_pairs_hook=_no_duplicates)
    except json.JSONDecodeError as e:
        raise JSONFault(f"{e.lineno}:{e.colno}: {e.msg}")
    except (OSError, UnicodeDecodeError) as e:
        raise JSONFault(str(e))


def pointer(path):
    return "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in path)


def first_error(validator, doc):
    """(pointer, message) of the most relevant error, or None when doc is valid."""
    err = best_match(validator.iter_errors(doc))
    if err is None:
        return None
    msg = err.message
    if len(msg) > 300:
        msg = msg[:300] + "..."
    return pointer(err.absolute_path) or "(root)", msg


def rel(root, path):
    return os.path.relpath(path, root)


# ---------------------------------------------------------------- checks beyond the schema

def ops_def_user_rows(path):
    """{json_name: (in_min, in_max, out)} of ops.def rows flagged USER."""
    rows = {}
    pat = re.compile(r'^OP\(\s*(\w+)\s*,\s*(\w+)\s*,\s*(-?\d+)\s*,\s*(-?\d+)\s*,\s*(-?\d+)\s*,\s*"[^"]*"\s*,([^)]*)\)')
    with open(path, encoding="utf-8") as f:
        for line in f:
            m = pat.match(line.strip())
            if m and any(flag.strip() == "USER" for flag in m.group(6).split("|")):
                rows[m.group(2)] = (int(m.group(3)), int(m.group(4)), int(m.group(5)))
    return rows


def schema_op_rows(schema):
    """{type: (in_min, in_max, out_min, out_max or None)} from the operator rules of model.schema.json."""
    op = schema["$defs"]["operator"]
    rows = {}
    for rule in op.get("allOf", []):
        t = rule["if"]["properties"]["type"]["const"]
        props = rule["then"]["properties"]
        rows[t] = (props["in"].get("minItems"), props["in"].get("maxItems"),
                   props["out"].get("minItems"), props["out"].get("maxItems"))
    return op["properties"]["type"]["enum"], rows


def check_ops_def(root, schema):
    path = os.path.join(root, "runtime", "ops.def")
    if not os.path.exists(path):
        print("note runtime/ops.def not found; operator table cross-check skipped")
        return
    what = "runtime/ops.def USER rows agree with model.schema.json"
    try:
        table = ops_def_user_rows(path)
        enum, rules = schema_op_rows(schema)
    except (KeyError, TypeError, OSError) as e:
        report(False, what, f"cannot read the operator rules: {e!r}")
        return
    problems = []
    if sorted(enum) != sorted(table):
        problems.append(f"types differ: only in ops.def {sorted(set(table) - set(enum))}, "
                        f"only in the schema {sorted(set(enum) - set(table))}")
    if sorted(rules) != sorted(enum):
        problems.append(f"types without exactly one rule: {sorted(set(enum) ^ set(rules))}")
    for t, (imin, imax, nout) in sorted(table.items()):
        if t not in rules:
            continue
        want = (imin, imax, 1 if nout < 0 else nout, None if nout < 0 else nout)
        if rules[t] != want:
            problems.append(f"{t}: schema in/out counts {rules[t]}, ops.def {want}")
    report(not problems, what, "; ".join(problems))


def numbers_in(doc, path=()):
    if isinstance(doc, bool):
        return
    if isinstance(doc, (int, float)):
        yield path
    elif isinstance(doc, dict):
        for k, v in doc.items():
            yield from numbers_in(v, path + (k,))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            yield from numbers_in(v, path + (i,))


def resolve(doc, ptr):
    node = doc
    for part in ptr.split("/")[1:]:
        part = part.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return False
    return True


def source_problems(doc):
    """Shipped clusters name a source for every figure of device, node and network."""
    sources = doc.get("sources", {})
    problems = [f"sources{k}: points at nothing" for k in sources if not resolve(doc, k)]
    tops = [((top,), doc.get(top, {})) for top in ("device", "node", "network")]
    for i, g in enumerate(doc.get("groups", [])):
        tops += [(("groups", str(i), top), g.get(top, {})) for top in ("device", "node", "network")]
    for base, obj in tops:
        for path in numbers_in(obj, base):
            ptrs = [pointer(path[:i]) for i in range(1, len(path) + 1)]
            if not any(p in sources for p in ptrs):
                problems.append(f"{pointer(path)}: no entry in sources")
    return problems


# ---------------------------------------------------------------- main

def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else
                           os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    print(f"validate_schemas: {root}")

    validators = {}
    for kind in ("model", "cluster", "policy"):
        path = os.path.join(root, "schemas", f"{kind}.schema.json")
        what = f"{rel(root, path)}: valid JSON Schema 2020-12"
        try:
            schema = load_json(path)
            Draft202012Validator.check_schema(schema)
        except JSONFault as e:
            report(False, what, str(e))
            continue
        except jsonschema.exceptions.SchemaError as e:
            report(False, what, f"{pointer(e.absolute_path) or '(root)'}: {e.message}")
            continue
        if schema.get("$schema") != "https://json-schema.org/draft/2020-12/schema":
            report(False, what, "$schema is not https://json-schema.org/draft/2020-12/schema")
            continue
        report(True, what)
        validators[kind] = Draft202012Validator(schema)
        if kind == "model":
            check_ops_def(root, schema)

    def expect_valid(kind, path, extra=None):
        what = rel(root, path)
        if kind not in validators:
            report(False, what, f"{kind}.schema.json did not load")
            return
        try:
            doc = load_json(path)
        except JSONFault as e:
            report(False, what, str(e))
            return
        err = first_error(validators[kind], doc)
        if err:
            report(False, what, f"{err[0]}: {err[1]}")
            return
        problems = extra(doc) if extra else []
        report(not problems, what, "; ".join(problems))

    def expect_invalid(path):
        what = rel(root, path)
        name = os.path.basename(path)
        kind = next((k for k in ("model", "cluster", "policy") if name.startswith(k + "-")), None)
        if kind is None:
            report(False, what, "a bad file's name must start with model-, cluster- or policy-")
            return
        if kind not in validators:
            report(False, what, f"{kind}.schema.json did not load")
            return
        try:
            doc = load_json(path)
        except JSONFault as e:
            report(False, what, f"not well-formed JSON, so it tests no schema rule ({e})")
            return
        err = first_error(validators[kind], doc)
        if err is None:
            report(False, what, f"accepted by {kind}.schema.json, but it must be rejected")
        else:
            report(True, what, f"rejected as expected: {err[0]}: {err[1]}")

    models = sorted(glob.glob(os.path.join(root, "models", "*.json")))
    models += sorted(glob.glob(os.path.join(root, "tests", "models", "*.json")))  # the test suites' own models
    if not models:
        print("note models/*.json: no model files yet")
    for path in models:
        expect_valid("model", path)
    clusters = sorted(glob.glob(os.path.join(root, "models", "clusters", "*.json")))
    if not clusters:
        report(False, "models/clusters/*.json", "no cluster files")
    for path in clusters:
        expect_valid("cluster", path, source_problems)
    for path in sorted(glob.glob(os.path.join(root, "models", "policies", "*.json"))):
        expect_valid("policy", path)
    for path in sorted(glob.glob(os.path.join(root, "tests", "schema_good", "*.json"))):
        kind = "cluster" if os.path.basename(path).startswith("cluster-") else "model"
        expect_valid(kind, path)
    bad = sorted(glob.glob(os.path.join(root, "tests", "schema_bad", "*.json")))
    if not bad:
        report(False, "tests/schema_bad/*.json", "no bad files: nothing shows the schemas reject anything")
    for path in bad:
        expect_invalid(path)

    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
