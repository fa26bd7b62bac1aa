#!/usr/bin/env python3
"""The README's library examples are files under examples/, verbatim (issue 22, item 6; issue 19).

The README marks each block with the line `<!-- example: examples/NAME.cpp -->`; the next
```cpp fenced block must equal the file byte for byte, so the README shows code that the build
compiles and ctest runs (example.first_batch, example.global_shuffle). Also checks that the
first example reaches its first batch in at most MAX_STATEMENTS statements of `main` (counting
`MPI_Init` and the `for` over the epoch).

Usage: check_readme_example.py [REPO_ROOT]   (exit 1 with a message naming what differs)
"""
import difflib
import os
import re
import sys

EXAMPLE = "examples/first_batch.cpp"
EXAMPLES = (EXAMPLE, "examples/global_shuffle.cpp")
MAX_STATEMENTS = 6


def readme_block(readme_text, example=EXAMPLE):
    marker = "<!-- example: %s -->" % example
    at = readme_text.find(marker)
    if at < 0:
        return None, "README.md lacks the marker line '%s'" % marker
    m = re.compile(r"```cpp\n(.*?)```", re.S).search(readme_text, at)
    if not m:
        return None, "README.md has no ```cpp block after '%s'" % marker
    return m.group(1), None


def statements_to_first_batch(code):
    """Statements of main() up to and including the `for` over loader.epoch(...)."""
    body = code[code.index("int main("):]
    count = 0
    for line in body.splitlines()[1:]:
        text = line.split("//")[0].strip()
        if ".epoch(" in text and text.startswith("for"):
            return count + 1
        if text.endswith(";"):
            count += 1
    raise ValueError("%s has no `for (... : loader.epoch(e))` in main" % EXAMPLE)


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "..")
    with open(os.path.join(root, "README.md"), encoding="utf-8") as f:
        readme = f.read()
    for example in EXAMPLES:
        block, error = readme_block(readme, example)
        if error:
            print("check_readme_example: " + error)
            return 1
        with open(os.path.join(root, example), encoding="utf-8") as f:
            code = f.read()
        if block != code:
            diff = difflib.unified_diff(code.splitlines(), block.splitlines(), example,
                                        "README.md block", lineterm="")
            print("check_readme_example: README.md's block differs from %s:\n%s" %
                  (example, "\n".join(diff)))
            return 1
    with open(os.path.join(root, EXAMPLE), encoding="utf-8") as f:
        code = f.read()
    n = statements_to_first_batch(code)
    if n > MAX_STATEMENTS:
        print("check_readme_example: %s takes %d statements to its first batch (at most %d)" %
              (EXAMPLE, n, MAX_STATEMENTS))
        return 1
    print("check_readme_example: README.md shows %s verbatim; %d statements to the first batch "
          "of %s" % (", ".join(EXAMPLES), n, EXAMPLE))
    return 0


if __name__ == "__main__":
    sys.exit(main())
