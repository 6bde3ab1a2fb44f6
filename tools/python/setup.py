"""pip install --no-build-isolation ./tools/python: builds actmem._native from the library's sources
with Debian's pybind11 and setuptools (no PyPI). CMake builds the same module for tests
(tools/python/CMakeLists.txt); this is the route for installing it into a Python environment."""
import glob
import os

from pybind11.setup_helpers import ParallelCompile, Pybind11Extension
from setuptools import setup

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

library = sorted(p for p in glob.glob(os.path.join(ROOT, "src", "**", "*.cc"), recursive=True)
                 if not p.endswith("_test.cc"))
if not library:
    raise SystemExit(f"actmem: no library sources under {ROOT}/src; install from a checkout of the repository")

# ACTMEM_BUILD_JOBS=4 compiles four files at a time (default one).
ParallelCompile("ACTMEM_BUILD_JOBS", default=1).install()

setup(
    name="actmem",
    version="0.1.0",
    description="GPU memory of transformer training and serving, tensor by tensor",
    packages=["actmem"],
    ext_modules=[
        Pybind11Extension(
            "actmem._native",
            [os.path.join(HERE, "actmem_module.cc"), *library],
            include_dirs=[os.path.join(ROOT, "include"), os.path.join(ROOT, "src")],
            # yaml-cpp and toml++ (Debian libyaml-cpp-dev, libtomlplusplus-dev) read the --from configs;
            # toml++ is linked as the shared library Debian ships, as CMake's target links it.
            libraries=["fmt", "yaml-cpp", "tomlplusplus"],
            define_macros=[("TOML_HEADER_ONLY", "0"), ("TOML_SHARED_LIB", "1")],
            cxx_std=20,
        )
    ],
    python_requires=">=3.9",
    zip_safe=False,
)
