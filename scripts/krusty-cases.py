#!/usr/bin/env python3
"""Turns kustomize's krusty tests (api/krusty/*_test.go of kubernetes-sigs/kustomize) into
lariat-kustomize's case files: the files each test writes, the directory it builds and the
output it expects. Only tests made of WriteK/WriteC/WriteF (literal, or a string constant, or
a helper function of the tests that writes so), one Run with the default options and one
AssertActualEqualsExpected are taken; the others are counted as skipped.

    scripts/krusty-cases.py KUSTOMIZE_CHECKOUT/api/krusty OUT_DIR
"""
import os
import re
import sys

CALL = re.compile(
    r'th\.(WriteK|WriteC|WriteF)\(\s*"([^"]*)"\s*,\s*`([^`]*)`\s*\)'
    r'|(\w+)\s*:?=\s*th\.Run\(\s*"([^"]*)"\s*,\s*th\.MakeDefaultOptions\(\)\s*\)'
    r'|th\.AssertActualEqualsExpected(?:NoIdAnnotations)?\(\s*(\w+)\s*,\s*`([^`]*)`\s*\)',
    re.S,
)
HELPER = re.compile(r'^func (\w+)\(th \*?kusttest_test\.Harness\) \{\n(.*?)^\}', re.M | re.S)
CONSTANT = re.compile(r'(?:^(?:const|var)\s+|^\s*)(\w+)\s*:?=\s*(`[^`]*`)', re.M)
HEADERS = {
    "WriteK": "\napiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n",
    "WriteC": "\napiVersion: kustomize.config.k8s.io/v1alpha1\nkind: Component\n",
}
ALLOWED = re.compile(r'^\s*(th\s*:?=\s*kusttest_test\.MakeHarness\(t\)|//.*|)\s*$')


def relative(path):
    path = path.lstrip("/")
    return "" if path in (".", "") else path


def expand(body, helpers, constants, depth=0):
    """The body with helper calls inlined and string constants written out."""
    local = dict(constants)
    local.update((m.group(1), m.group(2)) for m in CONSTANT.finditer(body))
    body = CONSTANT.sub("", body)
    for name, value in local.items():
        body = re.sub(r'(th\.Write[KCF]\(\s*"[^"]*"\s*,\s*)' + name + r'(\s*\))', lambda m: m.group(1) + value + m.group(2), body)
        body = re.sub(r'(AssertActualEqualsExpected\w*\(\s*\w+\s*,\s*)' + name + r'(\s*\))', lambda m: m.group(1) + value + m.group(2), body)
    if depth < 3:
        for name, inner in helpers.items():
            body = re.sub(r'^\s*' + name + r'\(th\)\s*$', lambda m: expand(inner, helpers, constants, depth + 1), body, flags=re.M)
    return body


def convert(name, body):
    files, run, expected = [], None, None
    rest = body
    for match in CALL.finditer(body):
        rest = rest.replace(match.group(0), "", 1)
        if match.group(1):
            kind, path, content = match.group(1), relative(match.group(2)), match.group(3)
            if kind in HEADERS:
                path = os.path.join(path, "kustomization.yaml") if path else "kustomization.yaml"
                content = HEADERS[kind] + content
            files.append((path, content))
        elif match.group(4):
            if run is not None:
                return None
            run = relative(match.group(5))
        else:
            if expected is not None:
                return None
            expected = match.group(7)
    if run is None or expected is None:
        return None
    if not all(ALLOWED.match(line) for line in rest.splitlines()):
        return None
    out = []
    for path, content in files:
        out.append(f"=== file {path}\n{content}\n")
    out.append(f"=== build {run or '.'}\n=== expected\n{expected}\n")
    return "".join(out)


def main(source, target):
    os.makedirs(target, exist_ok=True)
    taken = skipped = 0
    sources = {f: open(os.path.join(source, f)).read() for f in sorted(os.listdir(source)) if f.endswith("_test.go")}
    helpers = {m.group(1): m.group(2) for text in sources.values() for m in HELPER.finditer(text)}
    for file, text in sources.items():
        constants = {m.group(1): m.group(2) for m in re.finditer(r'^(?:const|var)\s+(\w+)\s*=\s*(`[^`]*`)', text, re.M)}
        for match in re.finditer(r'^func (Test\w+)\(t \*testing\.T\) \{\n(.*?)^\}', text, re.M | re.S):
            case = convert(match.group(1), expand(match.group(2), helpers, constants))
            if case is None:
                skipped += 1
                continue
            taken += 1
            stem = file[: -len("_test.go")]
            with open(os.path.join(target, f"{stem}.{match.group(1)}.txt"), "w") as f:
                f.write(f"# kustomize api/krusty/{file} {match.group(1)}\n{case}")
    print(f"{taken} cases written, {skipped} tests skipped")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
