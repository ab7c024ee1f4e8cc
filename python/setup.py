"""Builds the clusterjit Python package against an existing libclusterjit.so (docs/python.md):

    pip install --no-build-isolation ./python

The library is found, in order, from: $CJIT_PREFIX (an install prefix: `cmake --install build --prefix P`),
`pkg-config clusterjit` (an installed package on PKG_CONFIG_PATH), or the source tree's build/ directory.
Only the extension module (python/src/module.cc, over the C API) is compiled; it links that library with an
RPATH to it. Needs pybind11 (python3-pybind11) and the DLPack header (libdlpack-dev).
"""
import os
import subprocess

import pybind11
from setuptools import Extension, setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE_ROOT = os.path.dirname(HERE)


def pkg_config(*args):
    try:
        return subprocess.run(["pkg-config", *args, "clusterjit"], check=True, capture_output=True,
                              text=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def find_library():
    """(include dir, library dir, cjit CLI path or "")."""
    prefix = os.environ.get("CJIT_PREFIX")
    if prefix:
        libdir = next((os.path.join(prefix, d) for d in ("lib", "lib64", "lib/x86_64-linux-gnu")
                       if os.path.exists(os.path.join(prefix, d, "libclusterjit.so"))), None)
        if libdir is None:
            raise SystemExit(f"clusterjit: no libclusterjit.so under CJIT_PREFIX={prefix}")
        return os.path.join(prefix, "include"), libdir, os.path.join(prefix, "bin", "cjit")
    libdir = pkg_config("--variable=libdir")
    if libdir:
        prefix = os.path.normpath(os.path.join(libdir, ".."))
        return pkg_config("--variable=includedir"), os.path.normpath(libdir), os.path.join(prefix, "bin", "cjit")
    build = os.path.join(SOURCE_ROOT, "build")
    if os.path.exists(os.path.join(build, "libclusterjit.so")):
        return os.path.join(SOURCE_ROOT, "include"), build, os.path.join(build, "tools", "cjit")
    raise SystemExit("clusterjit: libclusterjit.so not found: set CJIT_PREFIX to an install prefix, put "
                     "clusterjit.pc on PKG_CONFIG_PATH, or build the source tree first (tools/build-and-test.sh)")


INCLUDE_DIR, LIBRARY_DIR, CLI = find_library()


class BuildPyWithInfo(build_py):
    """Records the cjit program beside the library (python3 -m clusterjit forwards to it)."""

    def run(self):
        super().run()
        path = os.path.join(self.build_lib, "clusterjit", "_build_info.py")
        with open(path, "w") as f:
            f.write(f"CLI = {CLI if os.path.exists(CLI) else ''!r}\n")


setup(
    name="clusterjit",
    version="0.2.0",
    description="JIT clustering executor for ONNX models, with ONNX Runtime's InferenceSession API",
    packages=["clusterjit"],
    python_requires=">=3.8",
    install_requires=["numpy"],
    ext_modules=[Extension(
        "clusterjit._clusterjit",
        sources=[os.path.join("src", "module.cc")],
        include_dirs=[INCLUDE_DIR, pybind11.get_include()],
        library_dirs=[LIBRARY_DIR],
        runtime_library_dirs=[LIBRARY_DIR],
        libraries=["clusterjit"],
        extra_compile_args=["-std=c++17", "-O2", "-fvisibility=hidden"],
        language="c++",
    )],
    cmdclass={"build_py": BuildPyWithInfo},
    zip_safe=False,
)
