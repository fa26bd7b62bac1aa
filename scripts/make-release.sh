#!/usr/bin/env bash
# Makes the release tarball of mpistage from a commit with `git archive` and prints its sha256,
# the line the Spack recipe (spack/packages/mpistage/package.py) needs for that release.
#
#   scripts/make-release.sh [REF] [OUT_DIR]     # REF: a tag or commit (default HEAD),
#                                              # OUT_DIR: where the tarball goes (default dist/)
#
# The tarball is mpistage-<VERSION>.tar.gz (VERSION from project() in CMakeLists.txt at REF)
# holding mpistage-<VERSION>/ with every file tracked at REF but those marked export-ignore in
# .gitattributes (the Spack recipe, which records this tarball's checksum). git archive writes
# the commit into cmake/git-commit.txt (export-subst), so a build from the tarball reports the
# commit it came from. The output is reproducible: the same REF gives the same bytes (file
# times are the commit's, gzip -n stores no name or time).
set -euo pipefail
ref="${1:-HEAD}"
out="${2:-dist}"
root="$(git rev-parse --show-toplevel)"
commit="$(git -C "$root" rev-parse --verify "$ref^{commit}")"
version="$(git -C "$root" show "$commit:CMakeLists.txt" |
    sed -n 's/^project(mpistage VERSION \([0-9][0-9.]*\).*/\1/p' | head -1)"
[ -n "$version" ] || { echo "make-release: no 'project(mpistage VERSION X.Y.Z' at $ref" >&2; exit 1; }
mkdir -p "$out"
tarball="$(cd "$out" && pwd)/mpistage-$version.tar.gz"
git -C "$root" archive --format=tar --prefix="mpistage-$version/" "$commit" | gzip -n -9 > "$tarball"
sha="$(sha256sum "$tarball" | cut -d' ' -f1)"
echo "tarball: $tarball"
echo "commit:  $commit"
echo "sha256:  $sha"
echo "recipe:  version(\"$version\", sha256=\"$sha\")"
