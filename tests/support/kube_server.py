"""Where the tests find the real programs, and the control plane of ``app.lab`` for them.

The binaries come from ``KUBEBUILDER_ASSETS`` (controller-runtime envtest's convention) and
``PORTAL_TOOLS_BIN``: ``make tools`` builds them from the Go module proxy into ``.cache/bin``
and ``make pytest`` points both variables at it. Missing programs skip a test, except in CI.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import NoReturn

import pytest

from app.lab.control_plane import CRD_API_VERSION as CRD_API_VERSION
from app.lab.control_plane import ApiServer as ApiServer
from app.lab.control_plane import fast_adapter as fast_adapter
from app.lab.control_plane import install_crds as install_crds
from app.lab.control_plane import kubeconfig_yaml as kubeconfig_yaml

BINARIES = ("etcd", "kube-apiserver", "kube-controller-manager")
MISSING = ("the real-API-server tests need KUBEBUILDER_ASSETS with etcd, kube-apiserver and "
           "kube-controller-manager: `make tools` builds them into .cache/bin, then "
           "`export KUBEBUILDER_ASSETS=$PWD/.cache/bin` (`make pytest` does both)")


def tools_bin() -> Path | None:
    """The programs ``make tools`` built (helm, kwok, KAI, vcluster): ``PORTAL_TOOLS_BIN``."""
    value = os.environ.get("PORTAL_TOOLS_BIN")
    return Path(value) if value and Path(value).is_dir() else None


def skip_unless_ci(message: str) -> NoReturn:
    """A test whose programs are missing skips, except in CI, where nothing may be missing."""
    if os.environ.get("CI") == "true":
        pytest.fail(message)
    pytest.skip(message)


def tool(name: str) -> Path:
    """A program ``make tools`` built (helm, kwok, KAI's, vcluster, kine, kubectl)."""
    folder = tools_bin()
    if folder is None or not (folder / name).is_file():
        skip_unless_ci(f"{name} is not in PORTAL_TOOLS_BIN: `make tools` builds it into "
                       ".cache/bin, then `export PORTAL_TOOLS_BIN=$PWD/.cache/bin` "
                       "(`make pytest` does both)")
    return folder / name


def kube_assets() -> Path | None:
    """The envtest binaries' folder, when ``KUBEBUILDER_ASSETS`` names a complete one."""
    value = os.environ.get("KUBEBUILDER_ASSETS")
    if not value:
        return None
    folder = Path(value)
    return folder if all((folder / name).is_file() for name in BINARIES) else None


