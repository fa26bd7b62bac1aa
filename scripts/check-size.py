#!/usr/bin/env python3
"""Reports source files over MAX_LINES lines and functions over MAX_FN lines.

Functions are found by brace matching: a '{' that closes a line ending a signature ')' (or
') const', ') noexcept', ...) at namespace/class scope opens a function body. Good enough for
this code base's clang-format style; it is a review aid, not a parser.
Usage: scripts/check-size.py [--max-lines N] [--max-fn N] DIR...
"""
import re
import sys
from pathlib import Path

def functions(text):
    lines = text.split("\n")
    depth = 0
    stack = []  # (depth_at_open, start_line, is_function)
    out = []
    sig = re.compile(r"\)\s*(const)?\s*(noexcept)?\s*(override)?\s*(->\s*[\w:<>&\* ]+)?\s*\{\s*$|^\s*\{\s*$")
    for i, line in enumerate(lines):
        code = re.sub(r"//.*", "", line)
        code = re.sub(r'"(\\.|[^"\\])*"', '""', code)
        code = re.sub(r"'(\\.|[^'\\])*'", "''", code)
        for j, ch in enumerate(code):
            if ch == "{":
                is_fn = False
                if not any(s[2] for s in stack):
                    head = code[: j + 1]
                    prev = lines[i - 1] if i > 0 else ""
                    if re.search(r"\)\s*(const)?\s*(noexcept)?\s*(override)?(\s*->\s*[\w:<>&\*, ]+)?\s*(:.*)?\{$", head.rstrip()) \
                            and not re.match(r"\s*(if|for|while|switch|catch|else)\b", head):
                        is_fn = True
                    elif head.strip() == "{" and re.search(r"\)\s*(const)?\s*(noexcept)?\s*(override)?\s*$", prev) \
                            and not re.match(r"\s*(if|for|while|switch|catch|else|\}|.*\bnamespace\b)", prev):
                        is_fn = True
                    elif re.search(r"^\s*:\s*\w+\(|,\s*\w+_\(.*\)\s*\{$", head) :
                        is_fn = True
                stack.append((depth, i, is_fn))
                depth += 1
            elif ch == "}":
                depth -= 1
                if stack:
                    d, start, is_fn = stack.pop()
                    if is_fn:
                        # walk back to the signature start
                        s = start
                        while s > 0 and lines[s - 1].strip() and not lines[s - 1].rstrip().endswith((";", "}", "{")) \
                                and not lines[s - 1].strip().startswith(("//", "#")):
                            s -= 1
                        out.append((s + 1, i + 1, lines[s].strip()[:70]))
    return out

def main():
    args = sys.argv[1:]
    max_lines, max_fn = 400, 80
    dirs = []
    while args:
        a = args.pop(0)
        if a == "--max-lines": max_lines = int(args.pop(0))
        elif a == "--max-fn": max_fn = int(args.pop(0))
        else: dirs.append(a)
    bad = 0
    for d in dirs or ["src", "include"]:
        for p in sorted(Path(d).rglob("*")):
            if p.suffix not in (".cpp", ".hpp", ".h", ".cc"): continue
            text = p.read_text()
            n = text.count("\n")
            if n > max_lines:
                print(f"{p}: {n} lines (> {max_lines})"); bad += 1
            for s, e, name in functions(text):
                if e - s + 1 > max_fn:
                    print(f"{p}:{s}: function of {e - s + 1} lines (> {max_fn}): {name}"); bad += 1
    return 1 if bad else 0

if __name__ == "__main__":
    sys.exit(main())
