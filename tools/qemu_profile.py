#!/usr/bin/env python3
"""Instruction profile of a Cortex-M firmware run in QEMU, by function and
by source line.

QEMU's system emulator (Debian's build has no TCG plugins) can log every
translated block (`-d in_asm`) and, with block chaining off, every execution
of one (`-d exec,nochain`). Counting executions times the block's length
gives the instructions each address ran; `addr2line` (from binutils for
the firmware's ELF with debug info) maps the hot addresses to the inlined
function and source line they came from.

    qemu-system-arm -machine mps2-an386 -cpu cortex-m4 -icount shift=0 \\
        -nographic -semihosting-config enable=on,target=native \\
        -kernel FIRMWARE -d in_asm,exec,nochain -D /tmp/q.log
    tools/qemu_profile.py /tmp/q.log FIRMWARE [--top 40]

Instruction counts are exact (QEMU executes whole blocks unless an
exception cuts one short, which a firmware without interrupts rarely does);
they include the firmware's calibration loop and start-up.
"""

import argparse
import collections
import re
import shutil
import subprocess
import sys

IN_RE = re.compile(r"^IN: ?(.*)$")
INSN_RE = re.compile(r"^0x([0-9a-f]+):\s")
TRACE_RE = re.compile(r"^Trace \d+: 0x[0-9a-f]+ \[[0-9a-f]+/([0-9a-f]+)/")


def parse(log):
    """Returns (executions per block start, instruction addresses per block
    start, symbol per block start)."""
    blocks = {}
    symbols = {}
    runs = collections.Counter()
    current = None
    with open(log, errors="replace") as f:
        for line in f:
            if line.startswith("Trace "):
                m = TRACE_RE.match(line)
                if m:
                    runs[int(m.group(1), 16)] += 1
                current = None
                continue
            m = IN_RE.match(line)
            if m:
                current = []
                sym = m.group(1).strip()
                continue
            if current is not None:
                m = INSN_RE.match(line)
                if m:
                    pc = int(m.group(1), 16)
                    if not current:
                        blocks[pc] = current
                        symbols[pc] = sym
                    current.append(pc)
                elif not line.strip():
                    current = None
    return runs, blocks, symbols


def addr2line(elf, addrs):
    """Maps each address to its innermost function and file:line."""
    tool = shutil.which("arm-none-eabi-addr2line") or shutil.which("addr2line")
    if tool is None or not addrs:
        return {}
    out = subprocess.run(
        [tool, "-e", elf, "-f", "-C", "-i"] + [hex(a) for a in addrs],
        capture_output=True, text=True, check=False,
    ).stdout
    # With -i each address prints one or more (function, location) pairs;
    # separate them by asking again per address is slow, so use the
    # sentinel trick: addr2line prints "??" pairs for address 0.
    result = {}
    lines = out.splitlines()
    # Re-run one address at a time only if the batched output is ambiguous.
    if len(lines) == 2 * len(addrs):
        for i, a in enumerate(addrs):
            result[a] = (lines[2 * i], lines[2 * i + 1])
        return result
    for a in addrs:
        o = subprocess.run([tool, "-e", elf, "-f", "-C", "-i", hex(a)],
                           capture_output=True, text=True, check=False).stdout.splitlines()
        chain = [(o[i], o[i + 1]) for i in range(0, len(o) - 1, 2)]
        result[a] = chain[0] if chain else ("??", "??")
        if len(chain) > 1:
            # innermost first; keep the caller chain for context
            result[a] = (" <- ".join(c[0].split("::")[-1] for c in chain[:3]), chain[0][1])
    return result


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("log")
    p.add_argument("elf", nargs="?")
    p.add_argument("--top", type=int, default=40)
    p.add_argument("--blocks", type=int, default=0, help="also list the N hottest blocks")
    a = p.parse_args()
    runs, blocks, symbols = parse(a.log)
    per_pc = collections.Counter()
    per_sym = collections.Counter()
    total = 0
    for start, n in runs.items():
        body = blocks.get(start)
        if body is None:
            continue
        total += n * len(body)
        per_sym[symbols.get(start, "?")] += n * len(body)
        for pc in body:
            per_pc[pc] += n
    print(f"{total} instructions executed")
    print("\nby symbol (after inlining):")
    for sym, n in per_sym.most_common(a.top):
        print(f"  {n:>10}  {100 * n / total:5.1f}%  {sym}")
    if a.blocks:
        print("\nhottest blocks (start..end, executions, instructions):")
        weight = {s: n * len(blocks[s]) for s, n in runs.items() if s in blocks}
        for start, w in sorted(weight.items(), key=lambda kv: -kv[1])[: a.blocks]:
            body = blocks[start]
            print(f"  {start:#010x}..{body[-1]:#010x}  x{runs[start]:<8} {w:>10}  {100 * w / total:5.1f}%")
    if a.elf:
        hot = [pc for pc, _ in per_pc.most_common(20 * a.top)]
        where = addr2line(a.elf, hot)
        per_line = collections.Counter()
        for pc, n in per_pc.items():
            if pc in where:
                fn, loc = where[pc]
                per_line[(fn, loc.split(" ")[0])] += n
        print("\nby source line (the hottest addresses, innermost inlined function):")
        for (fn, loc), n in per_line.most_common(a.top):
            short = loc.split("/src/")[-1] if "/src/" in loc else loc
            print(f"  {n:>10}  {100 * n / total:5.1f}%  {short}  {fn[:80]}")


if __name__ == "__main__":
    sys.exit(main())
