"""Is a file a shared object this process can dlopen? Read from its ELF header, before dlopen.

dlopen maps the file; a truncated library (a copy cut short, a full disk during the install) can
then be touched beyond its end, and the process dies of SIGBUS instead of falling back. A library
built for another machine or class is refused by the loader with a terse message. `problem(path)`
reads the ELF header, the program headers and the section header table with plain file reads (no
mmap) and says in one line what is wrong: not ELF, wrong class / byte order / machine / type, or
a file shorter than its segments, sections or section table claim. Stdlib only (os, struct, sys).
"""

from __future__ import annotations

import os
import struct
import sys

ELF_MAGIC = b"\x7fELF"
ELFCLASS32, ELFCLASS64 = 1, 2
ELFDATA2LSB, ELFDATA2MSB = 1, 2
ET_DYN = 3
SHT_NOBITS = 8
PT_LOAD = 1
# e_machine of the machines Python reports in os.uname().machine (the ones this project may meet).
MACHINES = {
    "x86_64": (62, "x86-64"),
    "amd64": (62, "x86-64"),
    "aarch64": (183, "AArch64"),
    "arm64": (183, "AArch64"),
    "i386": (3, "i386"),
    "i686": (3, "i386"),
    "ppc64le": (21, "PowerPC64"),
    "s390x": (22, "S/390"),
    "riscv64": (243, "RISC-V"),
}
MACHINE_NAMES = dict(MACHINES.values())
_MAX_TABLE = 1 << 16  # entries read from a program or section header table at most


class _Bad(Exception):
    pass


def host_elf() -> tuple[int, int, int | None]:
    """(class, data encoding, e_machine or None when unknown) this interpreter loads."""
    elf_class = ELFCLASS64 if sys.maxsize > 2**32 else ELFCLASS32
    data = ELFDATA2LSB if sys.byteorder == "little" else ELFDATA2MSB
    machine = MACHINES.get(os.uname().machine.lower())
    return elf_class, data, machine[0] if machine else None


def _machine_name(number: int) -> str:
    return MACHINE_NAMES.get(number, f"e_machine {number}")


def _read(fh, offset: int, size: int, what: str, file_size: int) -> bytes:
    if offset < 0 or size < 0 or offset + size > file_size:
        raise _Bad(f"truncated: {what} ends at byte {offset + size}, the file has {file_size} bytes")
    fh.seek(offset)
    data = fh.read(size)
    if len(data) != size:
        raise _Bad(f"truncated: {what} could not be read in full")
    return data


def _check(fh, file_size: int, want: tuple[int, int, int | None]) -> None:
    ident = fh.read(16)
    if len(ident) < 16 or not ident.startswith(ELF_MAGIC):
        raise _Bad(f"not an ELF file ({file_size} bytes, starts with {ident[:4]!r})")
    elf_class, data, machine = ident[4], ident[5], want[2]
    if elf_class not in (ELFCLASS32, ELFCLASS64):
        raise _Bad(f"unknown ELF class {elf_class}")
    if data not in (ELFDATA2LSB, ELFDATA2MSB):
        raise _Bad(f"unknown ELF data encoding {data}")
    bits = {ELFCLASS32: 32, ELFCLASS64: 64}
    if elf_class != want[0]:
        raise _Bad(f"{bits[elf_class]}-bit ELF, this Python is {bits[want[0]]}-bit")
    if data != want[1]:
        order = {ELFDATA2LSB: "little", ELFDATA2MSB: "big"}
        raise _Bad(f"{order[data]}-endian ELF, this machine is {order[want[1]]}-endian")
    end = "<" if data == ELFDATA2LSB else ">"
    if elf_class == ELFCLASS64:
        header_fmt, ph_fmt, sh_fmt = "HHIQQQIHHHHHH", "IIQQQQQQ", "IIQQQQIIQQ"
    else:
        header_fmt, ph_fmt, sh_fmt = "HHIIIIIHHHHHH", "IIIIIIII", "IIIIIIIIII"
    header_size = 16 + struct.calcsize(end + header_fmt)
    fields = struct.unpack(end + header_fmt, _read(fh, 16, header_size - 16, "the ELF header", file_size))
    e_type, e_machine, _version, _entry, e_phoff, e_shoff = fields[:6]
    e_phentsize, e_phnum, e_shentsize, e_shnum = fields[8], fields[9], fields[10], fields[11]
    if machine is not None and e_machine != machine:
        raise _Bad(f"built for {_machine_name(e_machine)}, this machine is {_machine_name(machine)}")
    if e_type != ET_DYN:
        raise _Bad(f"ELF type {e_type} is not a shared object (ET_DYN)")
    ph_size = struct.calcsize(end + ph_fmt)
    if e_phnum and (e_phentsize < ph_size or e_phnum > _MAX_TABLE):
        raise _Bad(f"bad program header table ({e_phnum} entries of {e_phentsize} bytes)")
    for index in range(e_phnum):
        entry = _read(fh, e_phoff + index * e_phentsize, ph_size, "the program header table", file_size)
        if elf_class == ELFCLASS64:
            p_type, _flags, p_offset, _vaddr, _paddr, p_filesz = struct.unpack(end + ph_fmt, entry)[:6]
        else:
            p_type, p_offset, _vaddr, _paddr, p_filesz = struct.unpack(end + ph_fmt, entry)[:5]
        if p_type == PT_LOAD and p_offset + p_filesz > file_size:
            raise _Bad(
                f"truncated: segment {index} ends at byte {p_offset + p_filesz}, the file has {file_size}"
            )
    sh_size = struct.calcsize(end + sh_fmt)
    if e_shnum == 0 or e_shentsize < sh_size or e_shnum > _MAX_TABLE:
        raise _Bad(f"bad or missing section header table ({e_shnum} entries of {e_shentsize} bytes)")
    table_end = e_shoff + e_shnum * e_shentsize
    if table_end > file_size:
        raise _Bad(f"truncated: the section header table ends at byte {table_end}, the file has {file_size}")
    for index in range(e_shnum):
        entry = _read(fh, e_shoff + index * e_shentsize, sh_size, "the section header table", file_size)
        values = struct.unpack(end + sh_fmt, entry)
        sh_type, sh_offset, sh_bytes = values[1], values[4], values[5]
        if sh_type != SHT_NOBITS and sh_offset + sh_bytes > file_size:
            raise _Bad(
                f"truncated: section {index} ends at byte {sh_offset + sh_bytes}, the file has {file_size}"
            )


def problem(path: str, want: tuple[int, int, int | None] | None = None) -> str:
    """Why `path` cannot be a shared object for this process ('' when its headers say it can).

    `want` is (ELF class, data encoding, e_machine) and defaults to this interpreter's (host_elf()).
    """
    want = want or host_elf()
    try:
        with open(path, "rb") as fh:
            file_size = os.fstat(fh.fileno()).st_size
            _check(fh, file_size, want)
    except _Bad as exc:
        return f"{path} is not a usable shared object: {exc}"
    except OSError as exc:
        return f"cannot read {path}: {exc}"
    return ""
