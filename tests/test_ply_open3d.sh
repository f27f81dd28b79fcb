#!/usr/bin/env bash
# test_ply_open3d.sh - the PLY files of tsdf_mesh_write_ply must load in
# Open3D (Debian's python3-open3d), an independent PLY reader, with the same
# vertex and triangle counts as the engine's meshes.
#
#   tests/test_ply_open3d.sh path/to/make_ply
#
# make_ply fuses the synthetic sphere (closed) and the demo scene (open,
# several objects), both with colour, and the sphere again without colour,
# writes their meshes as PLY and prints "name vertices triangles" for each.
# Open3D's o3d.io.read_triangle_mesh must then report exactly those counts,
# vertex normals in every file (unit length), vertex colours in the coloured
# files and none in the other; the data must be the scene's (sphere vertices
# within half a voxel of radius 0.3 m with outward normals and the sphere's
# colour, the demo inside its room), and the sphere must be watertight per
# Open3D (is_watertight: edge- and vertex-manifold, no self-intersection).
# Exit 0 pass, 1 fail, 77 skipped (/usr/bin/python3, or $TSDF_PYTHON3, cannot
# import open3d).
set -u

make_ply=${1:?usage: $0 path/to/make_ply}
# Debian's python3-open3d lives in the system interpreter's dist-packages,
# which a python3 earlier on PATH (a virtualenv, pyenv) does not see.
# TSDF_PYTHON3 overrides it (e.g. to try the skip path).
py=${TSDF_PYTHON3:-/usr/bin/python3}

if [ ! -x "$py" ] || ! "$py" -c 'import open3d' >/dev/null 2>&1; then
    echo "SKIPPED: $py cannot import open3d (Debian package python3-open3d)"
    exit 77
fi
if [ ! -x "$make_ply" ]; then
    echo "FAIL: make_ply not found at '$make_ply'"
    exit 1
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

if ! "$make_ply" "$tmp/sphere.ply" "$tmp/demo.ply" "$tmp/sphere_gray.ply" >"$tmp/counts.txt"; then
    echo "FAIL: make_ply failed"
    exit 1
fi
cat "$tmp/counts.txt"

# The checks, in Open3D's Python API. Arguments: the counts file and the
# directory of the PLY files (named after the first column of the counts).
"$py" - "$tmp/counts.txt" "$tmp" <<'EOF'
import os
import sys

import numpy as np
import open3d as o3d

counts_path, ply_dir = sys.argv[1], sys.argv[2]
failures = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        failures.append(what)


# Colours make_ply fuses (scenes/tsdf_synth.c): the sphere is (200, 60, 50).
SPHERE_RGB = np.array([200, 60, 50]) / 255.0
HALF_VOXEL_M = 0.005
expected = {}
with open(counts_path) as f:
    for line in f:
        name, nv, nt = line.split()
        expected[name] = (int(nv), int(nt))
check(sorted(expected) == ["demo", "sphere", "sphere_gray"],
      "make_ply printed counts for sphere, demo, sphere_gray: %s" % sorted(expected))

for name, (nv, nt) in sorted(expected.items()):
    path = os.path.join(ply_dir, name + ".ply")
    mesh = o3d.io.read_triangle_mesh(path)
    v = np.asarray(mesh.vertices)
    t = np.asarray(mesh.triangles)
    n = np.asarray(mesh.vertex_normals)
    c = np.asarray(mesh.vertex_colors)
    check(len(v) == nv and len(t) == nt,
          "%s: Open3D reads %d vertices %d triangles, make_ply wrote %d %d"
          % (name, len(v), len(t), nv, nt))
    check(nt > 0 and t.min() >= 0 and t.max() < len(v), "%s: triangle indices in range" % name)
    check(mesh.has_vertex_normals() and len(n) == len(v), "%s: vertex normals present" % name)
    if len(n) == len(v) and len(v) > 0:
        err = float(np.abs(np.linalg.norm(n, axis=1) - 1.0).max())
        check(err <= 1e-5, "%s: normals unit length (max error %.2e)" % (name, err))
    colored = name != "sphere_gray"
    check(mesh.has_vertex_colors() == colored and (len(c) == len(v) if colored else len(c) == 0),
          "%s: vertex colours %s" % (name, "present" if colored else "absent"))

    if name.startswith("sphere"):
        r = np.linalg.norm(v, axis=1)
        check(float(np.abs(r - 0.3).max()) <= HALF_VOXEL_M,
              "%s: vertices within half a voxel of the sphere (radius %.4f .. %.4f m)"
              % (name, r.min(), r.max()))
        outward = int((np.einsum("ij,ij->i", n, v) > 0.0).sum())
        check(outward == len(v), "%s: %d of %d normals point outward" % (name, outward, len(v)))
    if name == "sphere":
        # The sphere is a single colour: every vertex must carry it (to the
        # 8-bit rounding of the PLY's uchar colours).
        if len(c) == len(v):
            err = float(np.abs(c - SPHERE_RGB).max()) * 255.0
            check(err <= 0.5, "sphere: colours are the sphere's (max error %.2f / 255)" % err)
        # is_watertight also checks self-intersection, all pairs of
        # triangles: seconds for the sphere, far too slow for the demo,
        # which is an open surface anyway.
        check(mesh.is_watertight(), "sphere: watertight per Open3D")
        chi = mesh.euler_poincare_characteristic()
        check(chi == 2, "sphere: Euler characteristic %d (2 for a sphere)" % chi)
    if name == "demo":
        # The room is 4 x 3 x 2.5 m about (0, 0, 1.25); fused surfaces end
        # within the truncation band (4 voxels) behind its walls.
        lo, hi = v.min(axis=0), v.max(axis=0)
        inside = bool((lo >= [-2.05, -1.55, -0.05]).all() and (hi <= [2.05, 1.55, 2.55]).all())
        check(inside, "demo: vertices inside the room (%s .. %s)"
              % (np.round(lo, 3).tolist(), np.round(hi, 3).tolist()))
        if len(c) == len(v):
            check(float(c.max()) > 0.0 and len(np.unique(np.round(c * 255), axis=0)) > 4,
                  "demo: several colours (%d distinct)" % len(np.unique(np.round(c * 255), axis=0)))

if failures:
    print("%d check(s) failed" % len(failures))
    sys.exit(1)
print("all checks passed")
EOF
