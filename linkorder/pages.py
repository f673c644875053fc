#!/usr/bin/env python3
"""Page-cache residency of a file: `pages.py evict FILE` drops its clean,
unmapped pages; `pages.py list FILE` prints the index of every cached page."""
import ctypes
import os
import sys

PAGE = 4096


def cached(path):
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int,
                          ctypes.c_int, ctypes.c_int, ctypes.c_long]
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    fd = os.open(path, os.O_RDONLY)
    size = os.fstat(fd).st_size
    addr = libc.mmap(None, size, 1, 1, fd, 0)  # PROT_READ, MAP_SHARED
    os.close(fd)
    if addr in (None, ctypes.c_void_p(-1).value):
        raise OSError(ctypes.get_errno(), "mmap " + path)
    n = (size + PAGE - 1) // PAGE
    vec = ctypes.create_string_buffer(n)
    if libc.mincore(addr, size, vec) != 0:
        raise OSError(ctypes.get_errno(), "mincore " + path)
    libc.munmap(addr, size)
    return [i for i in range(n) if vec.raw[i] & 1]


def main():
    op, path = sys.argv[1], sys.argv[2]
    if op == "evict":
        fd = os.open(path, os.O_RDONLY)
        os.fdatasync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(fd)
    elif op == "list":
        for i in cached(path):
            print(i)
    else:
        sys.exit("usage: pages.py evict|list FILE")


if __name__ == "__main__":
    main()
