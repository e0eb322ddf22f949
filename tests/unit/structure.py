#!/usr/bin/env python3
"""The code's shape, checked from the sources alone (no build):

1. Layers. Every folder of host and CUDA code sits in one layer of LAYERS below; a file may
   include the project's headers from its own layer or a lower one, never a higher one. The
   CMake libraries (CMakeLists.txt, one a layer) link in the same order, so a call upward would
   not link either; this check names the include that breaks the order.
2. No circles between folders, even within a layer.
3. Sizes: no source file over MAX_FILE_LINES lines (vendored headers excepted), no function over
   MAX_FUNCTION_LINES lines, from its name to its closing brace.

Usage: structure.py [ROOT] [--list]   (exit 0 clean, 1 with each violation on a line)"""
import os
import re
import sys

# Lowest first. Folders in the same row are one layer and may not include each other in a circle.
LAYERS = [
    ["src/shared", "src/base", "src/targets/xla"],
    ["cuda/check"],
    ["comm"],
    ["io"],
    ["src/config"],
    ["cuda", "cuda/svgd", "cuda/hmc", "src/backend"],
    ["src/targets"],
    ["src/run", "src/summary"],
    ["src/hmc", "src/svgd"],
    ["src/cli"],
]
FOLDERS_SCANNED = ["src", "comm", "io", "cuda"]
SKIP_FOLDERS = {"src/export", "src/targets/stan", "cuda/tools"}
EXTENSIONS = (".c", ".h", ".cu", ".cuh")
VENDORED = {"src/targets/xla/pjrt_c_api.h"}
MAX_FILE_LINES = 900
MAX_FUNCTION_LINES = 100

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def layer_of(folder):
    for i, row in enumerate(LAYERS):
        if folder in row:
            return i
    return None


def sources(root):
    for top in FOLDERS_SCANNED:
        for d, subdirs, files in os.walk(os.path.join(root, top)):
            rel = os.path.relpath(d, root)
            subdirs[:] = sorted(s for s in subdirs if os.path.join(rel, s) not in SKIP_FOLDERS)
            for f in sorted(files):
                if f.endswith(EXTENSIONS):
                    yield os.path.join(rel, f)


def strip_comments_and_strings(text):
    """Blanks comments, string and character literals, keeping newlines (line numbers hold)."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            out.append(c + " " * (min(j, n) - i - 1) + (c if j < n else ""))
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def blank_preprocessor(text):
    """Blanks preprocessor lines (with their continuations): macros are not functions."""
    lines = text.split("\n")
    out, cont = [], False
    for line in lines:
        if cont or line.lstrip().startswith("#"):
            cont = line.rstrip().endswith("\\")
            out.append("")
        else:
            out.append(line)
    return "\n".join(out)


OPENERS = re.compile(r"\b(namespace|extern\s*\"C\"|struct|union|enum|class)\b[^;{}()]*$")


def function_name(head):
    """The identifier before the parameter list that ends HEAD (skipping __launch_bounds__ and
    the like, which come before the name)."""
    depth, j = 0, len(head.rstrip()) - 1
    while j >= 0:
        if head[j] == ")":
            depth += 1
        elif head[j] == "(":
            depth -= 1
            if depth == 0:
                break
        j -= 1
    m = re.search(r"([A-Za-z_]\w*)\s*(<[^()]*>)?\s*$", head[:max(j, 0)])
    return m.group(1) if m else "?"


def functions(text):
    """(name, first line, last line) of every function body in TEXT: a brace opened at the
    top level (or inside a namespace or extern "C" block) right after a parameter list."""
    text = blank_preprocessor(strip_comments_and_strings(text))
    found, depth_kind, i = [], [], 0
    line_of = lambda pos: text.count("\n", 0, pos) + 1
    last_stmt_end = 0
    while i < len(text):
        c = text[i]
        if c == "{":
            head = text[last_stmt_end:i]
            container = all(k == "block" for k in depth_kind)
            if container and OPENERS.search(head.strip().split("\n")[-1] if head.strip() else ""):
                depth_kind.append("block")
                last_stmt_end = i + 1
            elif container and re.search(r"\)\s*(const\s*)?(noexcept\s*)?(->\s*[\w:<>]+\s*)?$", head) and "=" not in head.split(")")[-1]:
                name = function_name(head)
                start = last_stmt_end + len(head) - len(head.lstrip())
                # find the matching brace
                depth, j = 1, i + 1
                while j < len(text) and depth:
                    if text[j] == "{":
                        depth += 1
                    elif text[j] == "}":
                        depth -= 1
                    j += 1
                found.append((name, line_of(start), line_of(j - 1)))
                i = j
                last_stmt_end = j
                continue
            else:
                depth_kind.append("other")
            last_stmt_end = i + 1
        elif c == "}":
            if depth_kind:
                depth_kind.pop()
            last_stmt_end = i + 1
        elif c == ";" and all(k == "block" for k in depth_kind):
            last_stmt_end = i + 1
        i += 1
    return found


def check(root):
    problems = []
    files = list(sources(root))
    by_name = {}
    for f in files:
        by_name.setdefault(os.path.basename(f), []).append(f)
    edges = {}
    for f in files:
        folder = os.path.dirname(f)
        mine = layer_of(folder)
        if mine is None:
            problems.append(f"{f}: folder {folder} is in no layer of tests/unit/structure.py")
            continue
        text = open(os.path.join(root, f), errors="replace").read()
        for m in INCLUDE.finditer(text):
            name = os.path.basename(m.group(1))
            targets = by_name.get(name, [])
            if not targets:
                continue
            local = [t for t in targets if os.path.dirname(t) == folder]
            target = (local or targets)[0]
            other = os.path.dirname(target)
            if other == folder:
                continue
            theirs = layer_of(other)
            if theirs is not None and theirs > mine:
                problems.append(f"{f}: includes {target}, a layer above ({other} is layer {theirs}, {folder} is {mine})")
            edges.setdefault(folder, {}).setdefault(other, f"{f} -> {target}")
        lines = text.count("\n") + 1
        if lines > MAX_FILE_LINES and f not in VENDORED:
            problems.append(f"{f}: {lines} lines (at most {MAX_FILE_LINES})")
        if f not in VENDORED:
            for name, first, last in functions(text):
                if last - first + 1 > MAX_FUNCTION_LINES:
                    problems.append(f"{f}:{first}: function {name} is {last - first + 1} lines (at most {MAX_FUNCTION_LINES})")
    # circles between folders
    def visit(node, path, seen):
        for nxt in edges.get(node, {}):
            if nxt == path[0]:
                problems.append("folders in a circle: " + " -> ".join(path + [nxt]) + " (" +
                                "; ".join(edges[a][b] for a, b in zip(path + [nxt], (path + [nxt])[1:])) + ")")
            elif nxt not in seen and nxt > path[0]:
                seen.add(nxt)
                visit(nxt, path + [nxt], seen)
    for start in sorted(edges):
        visit(start, [start], {start})
    return problems


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    root = args[0] if args else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
    if "--list" in sys.argv:
        for f in sources(root):
            for name, first, last in functions(open(os.path.join(root, f), errors="replace").read()):
                print(f"{last - first + 1:5d} {f}:{first} {name}")
        return 0
    problems = check(root)
    for p in problems:
        print(p)
    print(f"structure: {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
