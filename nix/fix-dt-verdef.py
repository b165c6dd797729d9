#!/usr/bin/env python3
"""Points an ELF executable's DT_VERDEF entry back at its .gnu.version_d section.

The agents' native executables (Bun single-file builds of Claude Code and opencode) define
symbol versions. When patchelf sets their interpreter and RPATH for the Nix store it moves
.gnu.version_d but leaves DT_VERDEF at the old address (NixOS/patchelf#665, unmerged), and the
dynamic loader then reads garbage: Claude Code 2.1 segfaults before printing its version.
This rewrites that one dynamic entry after patchelf has run, and is a no-op when the two
already agree (a fixed patchelf). 64-bit little-endian ELF only: the agents ship no other.

Usage: fix-dt-verdef.py FILE...
"""

import struct
import sys

DT_NULL = 0
DT_VERDEF = 0x6FFFFFFC


def fix(path):
    with open(path, "r+b") as f:

        def read(at, fmt):
            f.seek(at)
            return struct.unpack(fmt, f.read(struct.calcsize(fmt)))

        if read(0, "<4sBB")[:3] != (b"\x7fELF", 2, 1):
            raise SystemExit(f"{path}: not a 64-bit little-endian ELF file")
        (shoff,) = read(0x28, "<Q")
        shentsize, shnum, shstrndx = read(0x3A, "<HHH")
        sections = [read(shoff + i * shentsize, "<IIQQQQIIQQ") for i in range(shnum)]
        names_at = sections[shstrndx][4]

        def name(section):
            f.seek(names_at + section[0])
            return f.read(256).split(b"\0", 1)[0].decode()

        by_name = {name(s): s for s in sections}
        if ".gnu.version_d" not in by_name:
            return f"{path}: no .gnu.version_d, nothing to do"
        verdef = by_name[".gnu.version_d"][3]  # sh_addr
        offset, size = by_name[".dynamic"][4:6]
        for at in range(offset, offset + size, 16):
            tag, value = read(at, "<qQ")
            if tag == DT_NULL:
                break
            if tag == DT_VERDEF:
                if value == verdef:
                    return f"{path}: DT_VERDEF already {verdef:#x}"
                f.seek(at)
                f.write(struct.pack("<qQ", tag, verdef))
                return f"{path}: DT_VERDEF {value:#x} -> {verdef:#x}"
    raise SystemExit(f"{path}: .gnu.version_d but no DT_VERDEF entry")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        raise SystemExit(__doc__)
    for arg in sys.argv[1:]:
        print(fix(arg))
