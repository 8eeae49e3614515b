"""Build step: ship the playbooks, inventories and runbooks inside the package.

The top-level folders stay the one source (people and tests use them from a checkout);
a wheel gets a copy under ``k3rollout/_shipped/`` so an installed k3rollout, run from any
folder, has its default playbook, the embedded sim inventory and the runbooks its reports
link to, and the docs/ pages the runbooks link to (see k3rollout/resources.py). Editable installs read the checkout directly.
"""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

SHIPPED = ("playbooks", "inventories", "runbooks", "docs")


class build_py_with_shipped(build_py):  # setuptools' command naming
    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            return
        here = Path(__file__).resolve().parent
        dest = Path(self.build_lib) / "k3rollout" / "_shipped"
        # a file deleted from the checkout (a sim host's fault, an old runbook) must not ride
        # along from an earlier build: the copy starts empty
        shutil.rmtree(dest, ignore_errors=True)
        for name in SHIPPED:
            shutil.copytree(here / name, dest / name, dirs_exist_ok=True,
                            ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))


setup(cmdclass={"build_py": build_py_with_shipped})
