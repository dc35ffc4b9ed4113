"""python/kffi/toolchain/__init__.py: the toolchain layer (named kffi.build before): the C++
toolchain, the build plan, its cache and lock (cpp.py, public as kffi.cpp), ahead-of-time export
(aot.py, kffi.aot) and typing stubs (stubgen.py, the function kffi.stubgen and the command
kffi-stubgen).

It imports the runtime (to load what it builds) and the base modules, never a higher layer.
"""
# SPDX-License-Identifier: Apache-2.0
