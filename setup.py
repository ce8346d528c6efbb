"""Build step of the wheel: ships the shim's ``.pth`` hook (``specprof_nvtx.pth``) at the root of
purelib, the way setuptools ships its own ``distutils-precedence.pth``, so that ``pip install``
puts it into site-packages and ``pip uninstall`` removes it (it is listed in the wheel's RECORD).
Everything else is declared in pyproject.toml."""

import os

from setuptools import setup
from setuptools.command.build_py import build_py

PTH = "specprof_nvtx.pth"
HERE = os.path.dirname(os.path.abspath(__file__))


class build_py_with_pth(build_py):
    def run(self):
        super().run()
        self.copy_file(os.path.join(HERE, "nvtx_annotate", PTH), os.path.join(self.build_lib, PTH),
                       preserve_mode=False)

    def get_outputs(self, include_bytecode=True):
        return super().get_outputs(include_bytecode) + [os.path.join(self.build_lib, PTH)]


setup(cmdclass={"build_py": build_py_with_pth})
