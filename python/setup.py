"""Builds qtrain._qtrain with the project's CMake (the checkout's root, one folder up) for pip; the
package's Python files are python/qtrain. The build directory is build-pip/ at the checkout's root,
kept between installs (ccache and CMake make a rebuild quick). CPU only: the module encodes CPU
tensors in this version, so the CUDA paths are not compiled for it."""
import os
import shutil
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        build_dir = os.environ.get("QTRAIN_PIP_BUILD_DIR", os.path.join(ROOT, "build-pip"))
        generator = ["-G", "Ninja"] if shutil.which("ninja") else []
        subprocess.check_call(["cmake", "-S", ROOT, "-B", build_dir, *generator, "-DCMAKE_BUILD_TYPE=Release",
                               f"-DPython3_EXECUTABLE={sys.executable}", "-DQTRAIN_CUDA_EMU=OFF", "-DQTRAIN_CUDA=OFF"])
        subprocess.check_call(["cmake", "--build", build_dir, "--target", "_qtrain", "--parallel",
                               str(os.cpu_count() or 1)])
        built = os.path.join(build_dir, "python", "qtrain", os.path.basename(self.get_ext_filename(ext.name)))
        target = self.get_ext_fullpath(ext.name)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copyfile(built, target)


setup(packages=["qtrain"], ext_modules=[Extension("qtrain._qtrain", sources=[])], cmdclass={"build_ext": CMakeBuild})
