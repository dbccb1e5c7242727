#!/usr/bin/env python3
"""Turn a hakmem heap profile into a flame graph (SVG).

  scripts/heap_flamegraph.py PROFILE [-o OUT.svg] [--program PROG] [--title TEXT]

PROFILE is a file hakmem wrote (HAKMEM_PROFILE=path, hak_profile_dump):
  - with --program PROG (the program that wrote it) and google-pprof
    installed, the stacks come from `google-pprof --collapsed PROG PROFILE`,
    which names every frame it can (static functions and inlined frames
    too, from the symbol tables and debug information);
  - otherwise from PROFILE.folded, hakmem's own folded stacks, whose frames
    are named by dladdr (exported symbols; module+offset for the rest).
Either way the widths are the estimated live bytes of each stack (the
samples scaled by 1 / probability of sampling).  A folded-stack file
("frame;frame;frame bytes" per line, root first) can be given directly.

The SVG is self-contained: one rectangle per frame, as wide as the bytes
held below it, its tooltip giving the name, bytes and share; the roots at
the bottom.  Written for hakmem; no code from other flame graph tools.
"""
import argparse
import hashlib
import html
import os
import shutil
import subprocess
import sys

WIDTH = 1200
ROW = 17
FONT = 11
MIN_PX = 0.5          # narrower frames are left out (their bytes still count)


def read_folded(lines):
    stacks = {}
    for line in lines:
        line = line.rstrip("\n")
        if not line or " " not in line:
            continue
        stack, _, count = line.rpartition(" ")
        try:
            n = float(count)
        except ValueError:
            continue
        if n <= 0:
            continue
        stacks[stack] = stacks.get(stack, 0.0) + n
    return stacks


def load(profile, program):
    if program and shutil.which("google-pprof"):
        out = subprocess.run(["google-pprof", "--collapsed", "--inuse_space", program, profile],
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        if out.returncode == 0 and out.stdout.strip():
            return read_folded(out.stdout.splitlines()), "google-pprof"
    folded = profile if profile.endswith(".folded") else profile + ".folded"
    if not os.path.exists(folded):
        if open(profile, errors="replace").readline().startswith("heap profile:"):
            sys.exit("%s: no %s next to it; give --program PROG to read it with google-pprof"
                     % (profile, folded))
        folded = profile
    with open(folded, errors="replace") as f:
        return read_folded(f), "hakmem"


class Node:
    __slots__ = ("name", "total", "kids")

    def __init__(self, name):
        self.name = name
        self.total = 0.0
        self.kids = {}


def build(stacks):
    root = Node("all")
    for stack, n in stacks.items():
        root.total += n
        node = root
        for frame in stack.split(";"):
            node = node.kids.setdefault(frame, Node(frame))
            node.total += n
    return root


def color(name):
    h = int(hashlib.md5(name.encode()).hexdigest()[:6], 16)
    r = 205 + h % 50
    g = 90 + (h >> 8) % 110
    b = 40 + (h >> 16) % 50
    return "rgb(%d,%d,%d)" % (r, g, b)


def human(b):
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if b < 1024 or unit == "TiB":
            return "%.1f %s" % (b, unit) if unit != "B" else "%d B" % b
        b /= 1024.0


def render(root, title, source):
    rects = []
    depth_max = [0]

    def walk(node, x, depth):
        w = node.total / root.total * WIDTH if root.total else 0
        if w < MIN_PX:
            return
        depth_max[0] = max(depth_max[0], depth)
        rects.append((x, depth, w, node))
        cx = x
        for kid in sorted(node.kids.values(), key=lambda k: k.name):
            walk(kid, cx, depth + 1)
            cx += kid.total / root.total * WIDTH

    walk(root, 0.0, 0)
    top = 50
    height = top + (depth_max[0] + 1) * ROW + 30
    out = []
    out.append('<?xml version="1.0" encoding="UTF-8"?>\n')
    out.append('<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" '
               'viewBox="0 0 %d %d" font-family="monospace" font-size="%d">\n'
               % (WIDTH + 20, height, WIDTH + 20, height, FONT))
    out.append('<rect width="100%" height="100%" fill="#fdfdf5"/>\n')
    out.append('<text x="%d" y="22" font-size="15" text-anchor="middle">%s</text>\n'
               % ((WIDTH + 20) // 2, html.escape(title)))
    out.append('<text x="10" y="40" fill="#555">live heap %s (estimated from samples); '
               'stacks from %s; width = bytes held below a frame</text>\n'
               % (html.escape(human(root.total)), html.escape(source)))
    base = height - 30
    for x, depth, w, node in rects:
        y = base - (depth + 1) * ROW
        share = 100.0 * node.total / root.total
        tip = "%s: %s (%.2f %%)" % (node.name, human(node.total), share)
        out.append('<g><title>%s</title><rect x="%.2f" y="%d" width="%.2f" height="%d" '
                   'fill="%s" stroke="#fdfdf5" stroke-width="0.5"/>'
                   % (html.escape(tip), 10 + x, y, w, ROW - 1, color(node.name)))
        chars = int(w / (FONT * 0.6)) - 1
        if chars >= 3:
            label = node.name if len(node.name) <= chars else node.name[:chars - 2] + ".."
            out.append('<text x="%.2f" y="%d">%s</text>'
                       % (10 + x + 3, y + ROW - 5, html.escape(label)))
        out.append("</g>\n")
    out.append("</svg>\n")
    return "".join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("profile")
    ap.add_argument("-o", "--output", help="SVG file (default: PROFILE.svg)")
    ap.add_argument("--program", help="the program that wrote the profile (for google-pprof)")
    ap.add_argument("--title", default=None)
    a = ap.parse_args()
    stacks, source = load(a.profile, a.program)
    if not stacks:
        sys.exit("%s: no live bytes in the profile" % a.profile)
    root = build(stacks)
    title = a.title or "hakmem heap profile: %s" % os.path.basename(a.profile)
    out = a.output or a.profile + ".svg"
    with open(out, "w") as f:
        f.write(render(root, title, source))
    print("%s: %d stacks, %s live, written to %s" % (a.profile, len(stacks), human(root.total), out))


if __name__ == "__main__":
    main()
