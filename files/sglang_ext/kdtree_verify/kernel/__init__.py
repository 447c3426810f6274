"""The CUDA library's side: the ctypes binding (`binding`), the ELF check before dlopen (`libfile`), the
head dims (`shapes`) and the pure-torch reference (`reference`).

Empty on purpose: `shapes` is imported without ctypes or torch; the binding only when the kernel loads.
"""
