"""The container image: what the Dockerfile builds and what the build context lets in.

No Docker engine runs on most machines here, so the Dockerfile is read and its parts are run
where they can be (the helm download's checksum step, the runtime stage's file layout); the
real build runs only where `docker info` answers.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import textwrap
from pathlib import Path

import pytest

from tests.deploy.dockerfile import ROOT, Stage, copy_sources, parse

DOCKERFILE = ROOT / "Dockerfile"
DOCKERIGNORE = ROOT / ".dockerignore"
FORBIDDEN_SOURCES = re.compile(
    r"(^|/)(\.venv|venv|\.env(\..*)?|\.git|\.cache|tests?|secrets?|bench|kubeconfig)(/|$)"
    r"|\.db$|\.pem$|\.key$"
)


def _stages() -> list[Stage]:
    return parse(DOCKERFILE.read_text())[1]


def _final() -> Stage:
    return _stages()[-1]


def _stage(name: str) -> Stage:
    return next(stage for stage in _stages() if stage.name == name)


def _args(stage: Stage) -> dict[str, str]:
    pairs = (i.arguments.partition("=") for i in stage.all("ARG"))
    return {name.strip(): value.strip() for name, _, value in pairs}


def test_the_final_stage_runs_as_a_numeric_non_root_user() -> None:
    users = _final().all("USER")
    assert users, "the final stage sets no USER: the container would run as root"
    user, _, group = users[-1].arguments.partition(":")
    assert user.isdigit() and int(user) != 0, users[-1]
    assert not group or (group.isdigit() and int(group) != 0), users[-1]
    # Everything after the last USER runs as that user: nothing switches back.
    last_user = _final().instructions.index(users[-1])
    assert all(i.keyword != "RUN" for i in _final().instructions[last_user:])


def test_nothing_secret_local_or_test_only_is_copied_from_the_build_context() -> None:
    copied: list[str] = []
    for stage in _stages():
        for instruction in stage.all("COPY") + stage.all("ADD"):
            from_stage, sources = copy_sources(instruction)
            if from_stage is None:
                copied += sources
    assert copied, "the Dockerfile copies nothing from the context"
    for source in copied:
        normalised = source.removeprefix("./").rstrip("/")
        assert normalised not in {"", "."}, "the whole build context is copied"
        assert not FORBIDDEN_SOURCES.search(normalised), source
    # ADD fetches URLs unverified; downloads go through the checksummed RUN instead.
    assert not any(stage.all("ADD") for stage in _stages())


def test_the_image_installs_the_project_without_its_test_extra() -> None:
    text = DOCKERFILE.read_text()
    assert "[test]" not in text
    runs = [i.arguments for stage in _stages() for i in stage.all("RUN")]
    installs = [command for command in runs if "pip install" in command]
    assert installs, "no pip install: where do the dependencies come from?"
    for command in installs:
        assert re.search(r"pip install \.(\s|$)", command), command
    for test_tool in ("pytest", "playwright", "schemathesis", "kmock", "ruff", "mypy"):
        assert test_tool not in text


def test_helm_is_pinned_and_its_archive_checked_before_it_is_unpacked() -> None:
    stage = _stage("helm")
    args = _args(stage)
    assert re.fullmatch(r"v\d+\.\d+\.\d+", args["HELM_VERSION"])
    for arch in ("AMD64", "ARM64"):
        assert re.fullmatch(r"[0-9a-f]{64}", args[f"HELM_SHA256_{arch}"])
    script = next(i.arguments for i in stage.all("RUN") if "get.helm.sh" in i.arguments)
    assert script.index("sha256sum -c") < script.index("tar -x")
    assert _final().all("COPY")[0].arguments.startswith("--from=helm ")


def _fake_helm_archive(tmp_path: Path) -> Path:
    """A helm release archive as get.helm.sh lays it out, holding a stand-in binary."""
    binary = b"#!/bin/sh\necho v0.0.0-standin\n"
    archive = tmp_path / "release.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        member = tarfile.TarInfo("linux-amd64/helm")
        member.size, member.mode = len(binary), 0o755
        tar.addfile(member, io.BytesIO(binary))
    return archive


def _run_helm_step(
    tmp_path: Path, archive: Path, checksum: str
) -> subprocess.CompletedProcess[str]:
    """The helm stage's RUN, with the download replaced by a copy of ``archive``."""
    script = next(i.arguments for i in _stage("helm").all("RUN") if "get.helm.sh" in i.arguments)
    work = tmp_path / "work"
    (work / "bin").mkdir(parents=True)
    script = script.replace("/usr/local/bin/", f"{work}/bin/")
    fake_python = work / "bin" / "python"
    fake_python.write_text(textwrap.dedent(f"""\
        #!/bin/sh
        for last; do :; done
        cp {archive} "$last"
    """))
    fake_python.chmod(0o755)
    env = {"PATH": f"{work / 'bin'}:/usr/bin:/bin", "TMPDIR": str(tmp_path), "TARGETARCH": "amd64",
           "HELM_VERSION": "v0.0.0", "HELM_SHA256_AMD64": checksum, "HELM_SHA256_ARM64": ""}
    return subprocess.run(["sh", "-c", script], env=env, capture_output=True, text=True,
                          timeout=60, check=False)


def test_the_helm_step_refuses_an_archive_whose_checksum_differs(tmp_path: Path) -> None:
    archive = _fake_helm_archive(tmp_path)
    result = _run_helm_step(tmp_path, archive, "0" * 64)
    assert result.returncode != 0
    assert not (tmp_path / "work" / "bin" / "helm").exists()


def test_the_helm_step_refuses_to_build_without_a_checksum(tmp_path: Path) -> None:
    archive = _fake_helm_archive(tmp_path)
    result = _run_helm_step(tmp_path, archive, "")
    assert result.returncode != 0
    assert "get.helm.sh/helm-v0.0.0-linux-amd64.tar.gz.sha256sum" in result.stderr
    assert not (tmp_path / "work" / "bin" / "helm").exists()


def test_the_helm_step_installs_the_binary_when_the_checksum_matches(tmp_path: Path) -> None:
    archive = _fake_helm_archive(tmp_path)
    result = _run_helm_step(tmp_path, archive, hashlib.sha256(archive.read_bytes()).hexdigest())
    assert result.returncode == 0, result.stderr
    assert "v0.0.0-standin" in result.stdout
    assert os.access(tmp_path / "work" / "bin" / "helm", os.X_OK)


def test_the_healthcheck_asks_the_web_process_with_python() -> None:
    checks = _final().all("HEALTHCHECK")
    assert len(checks) == 1
    words = json.loads(checks[0].arguments.partition(" CMD ")[2])
    assert words[0] == "python" and "/healthz" in words[-1] and ":8000" in words[-1]
    run_lines = " ".join(i.arguments for i in _final().all("RUN"))
    assert "curl" not in run_lines and "wget" not in run_lines


def test_the_image_is_labelled_with_the_oci_annotations() -> None:
    labels = " ".join(i.arguments for i in _final().all("LABEL"))
    for key in ("title", "description", "licenses", "version", "revision", "source", "created"):
        assert f"org.opencontainers.image.{key}=" in labels, key
    assert 'licenses="Apache-2.0"' in labels
    # A variable a stage does not declare expands to nothing (global ARGs only reach FROM).
    declared = set(_args(_final()))
    assert set(re.findall(r"\$\{(\w+)\}", labels)) <= declared


def test_the_default_command_serves_web_on_every_interface() -> None:
    all_interfaces = "0.0.0.0"  # noqa: S104 - what a container must listen on
    assert _final().all("CMD")[-1].words()[:4] == ["portal", "serve", "--host", all_interfaces]


def _runtime_tree(tmp_path: Path) -> Path:
    """The files the runtime stage copies from the context, laid out as in the image."""
    workdir = Path(_final().all("WORKDIR")[-1].arguments)
    tree = tmp_path / workdir.relative_to("/")
    tree.mkdir(parents=True)
    for instruction in _final().all("COPY"):
        from_stage, sources = copy_sources(instruction)
        if from_stage is not None:
            continue
        destination = tree / instruction.words()[-1]
        for source in sources:
            path = ROOT / source
            if path.is_dir():
                shutil.copytree(path, destination, ignore=shutil.ignore_patterns("__pycache__"))
            else:
                shutil.copy(path, destination / path.name if str(destination).endswith("/")
                            or destination.is_dir() else destination)
    return tree


def test_the_runtime_stage_copies_everything_the_portal_reads_at_run_time(
    tmp_path: Path,
) -> None:
    tree = _runtime_tree(tmp_path)
    elsewhere = tmp_path / "cwd"
    elsewhere.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PORTAL_")}
    env.update(PYTHONPATH=str(tree), PYTHONDONTWRITEBYTECODE="1",
               PORTAL_DATABASE_URL=f"sqlite:///{tmp_path / 'image.db'}")
    upgrade = subprocess.run([sys.executable, "-m", "app.process.cli", "db", "upgrade"], env=env,
                             cwd=elsewhere, capture_output=True, text=True, timeout=120,
                             check=False)
    assert upgrade.returncode == 0, upgrade.stderr
    probe = textwrap.dedent(f"""
        import app
        assert app.__file__.startswith({str(tree)!r}), app.__file__
        from fastapi.testclient import TestClient
        from app.kit.config import get_settings
        from app.process.asgi import create_app
        client = TestClient(create_app(get_settings()))
        assert client.get("/healthz").json() == {{"status": "ok"}}
        assert client.get("/readyz").status_code == 200
        page = client.get("/", headers={{"accept": "text/html"}}, follow_redirects=True)
        assert page.status_code == 200 and "<html" in page.text.lower(), page.status_code
        assert client.get("/static/vendor/htmx-2.0.11.min.js").status_code == 200
    """)
    result = subprocess.run([sys.executable, "-c", probe], env=env, cwd=elsewhere,
                            capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr


def _dockerignore_regexes() -> list[tuple[bool, re.Pattern[str]]]:
    """Docker's rules: `*` and `?` stay within a path segment, `**` spans any, `!` re-includes."""
    rules: list[tuple[bool, re.Pattern[str]]] = []
    for raw in DOCKERIGNORE.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        include = line.startswith("!")
        pattern = line.removeprefix("!").strip("/")
        regex = ""
        for part in re.split(r"(\*\*/?|\*|\?)", pattern):
            if part.startswith("**"):
                regex += "(.*/)?" if part.endswith("/") else ".*"
            elif part == "*":
                regex += "[^/]*"
            elif part == "?":
                regex += "[^/]"
            else:
                regex += re.escape(part)
        rules.append((include, re.compile(regex)))
    return rules


def _ignored(path: str) -> bool:
    """Whether the build context leaves ``path`` out (a folder's rule covers what it holds)."""
    parts = path.split("/")
    candidates = ["/".join(parts[: n + 1]) for n in range(len(parts))]
    ignored = False
    for include, regex in _dockerignore_regexes():
        if any(regex.fullmatch(candidate) for candidate in candidates):
            ignored = not include
    return ignored


@pytest.mark.parametrize("path", [
    ".venv/bin/python", ".git/HEAD", ".cache/bin/kube-apiserver", "tests/conftest.py",
    "tools/kube/go.mod",
    "portal.db", "portal-dev.db", "app/portal.db", ".env", ".env.local", "kubeconfig",
    "secrets/token", "app/__pycache__/cli.cpython-311.pyc", "bench/run.py", ".mypy_cache/x",
])
def test_the_build_context_leaves_out_local_state_secrets_and_tests(path: str) -> None:
    assert _ignored(path)


def test_the_build_context_keeps_every_file_the_dockerfile_copies() -> None:
    for stage in _stages():
        for instruction in stage.all("COPY"):
            from_stage, sources = copy_sources(instruction)
            if from_stage is None:
                for source in sources:
                    assert (ROOT / source).exists(), source
                    assert not _ignored(source), source
    assert not _ignored("app/process/cli.py") and not _ignored("templates/base.html")


def _docker_engine() -> bool:
    if shutil.which("docker") is None:
        return False
    info = subprocess.run(["docker", "info"], capture_output=True, timeout=30, check=False)
    return info.returncode == 0


@pytest.mark.skipif(not _docker_engine(), reason="no Docker engine answers `docker info`")
def test_the_image_builds_and_runs_as_non_root_with_helm_and_without_test_tools() -> None:
    tag = "gpu-tenant-portal:test"
    build = subprocess.run(["docker", "build", "-t", tag, str(ROOT)], capture_output=True,
                           text=True, timeout=1800, check=False)
    assert build.returncode == 0, build.stderr[-4000:]

    def run(*command: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["docker", "run", "--rm", tag, *command], capture_output=True,
                              text=True, timeout=300, check=False)

    assert run("id", "-u").stdout.strip() not in {"", "0"}
    assert run("helm", "version", "--short").returncode == 0
    assert run("portal", "--help").returncode == 0
    assert run("python", "-c", "import pytest").returncode != 0
