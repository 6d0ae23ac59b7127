"""``portal lab``: a GPU host on this machine where the portal's clusters really run.

From the programs ``make tools`` built: the host's etcd, kube-apiserver, controller-manager and
kube-scheduler; kwok keeping a GPU fleet read from a NodeList; KAI Scheduler's five programs;
the pod runner that plays the kubelet of the vCluster control planes; the CONNECT proxy through
which kubectl reaches them; the portal (``portal dev`` on a real host: web, worker, the local
sign-in provider) with ``portal webhook``, each under its ServiceAccount of the Kustomize base;
and its telemetry: a played DCGM exporter for kwok's GPUs and a real Prometheus scraping it and
the portal's two metrics addresses, with the portal's alert rules; a real SMTP server (aiosmtpd)
on loopback that keeps the portal's notification emails in a Maildir (``.lab/mail``).
Everything lives under one folder (``.lab``); a new lab starts from a clean one.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from cryptography.fernet import Fernet

from app.lab import charts, host, machines, network
from app.lab.control_plane import ApiServer
from app.lab.dcgm import PlayedDcgmExporter, bounded_adapter
from app.lab.gpu import GpuScheduling
from app.lab.kubelet_bootstrap import VirtualKwoks
from app.lab.metal3 import PROGRAM as BAREMETAL_OPERATOR
from app.lab.metal3 import BareMetalOperator
from app.lab.pods import NODE_LABELS, HostAccess, PodRunner, prepare_mount_points
from app.lab.ports import free_port
from app.lab.processes import terminate_all
from app.lab.prometheus import PrometheusError, PrometheusProcess, ScrapeJob, Telemetry
from app.lab.proxy import ConnectProxy

ENDPOINT_TEMPLATE = "https://{cluster}.{tenant}.vc.lab"
PLATFORM_ADMIN = "admin@example.com"
TOKEN_SECONDS = 30 * 24 * 3600
# A lab is watched by a person: a crashed control plane shows within seconds.
WORKER_RESYNC_SECONDS = 15
SLEEP_POLICY_SPEEDUP = 2880
# The pod network index of KAI's podgroupcontroller (virtual cluster pods count up from 0).
PODGROUPCONTROLLER_NETWORK = 9999
REQUIRED_PROGRAMS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler",
                     "kwok", "scheduler", "binder", "podgrouper", "queuecontroller",
                     "podgroupcontroller", "helm", "vcluster", "kine", "kubectl",
                     BAREMETAL_OPERATOR, "prometheus")
# The lab's idle window: a GPU idle a minute is called idle (the floor; 30 by default).
IDLE_GPU_WINDOW_MINUTES = 1
PROMETHEUS_READY_SECONDS = 60.0
# Every target up within a few scrapes of Prometheus being ready (a loaded machine is slow).
TARGETS_UP_SECONDS = 30.0
# The SMTP server answers within this long of its start.
MAIL_READY_SECONDS = 30.0
MAIL_SENDER = "GPU Tenant Portal (lab) <portal@lab.example.com>"


class LabError(RuntimeError):
    pass


@dataclass
class LabOptions:
    folder: Path = Path(".lab")
    programs: Path = Path(".cache/bin")
    charts: Path = Path(".cache/charts")
    kai_crds: Path = Path(".cache/kai-crds")
    metal3_crds: Path = Path(".cache/metal3-crds")
    nodes: Path = Path("app/devdata/host-nodes.json")
    deploy_base: Path = Path("deploy/kubernetes/base")
    rules: Path = Path("deploy/prometheus/portal-rules.yaml")
    port: int = 8000
    idp_port: int = 8900
    # Loopback ports: the portal's web and worker metrics, the played exporter, Prometheus.
    metrics_port: int = 9464
    worker_metrics_port: int = 9465
    dcgm_port: int = 9400
    prometheus_port: int = 9090
    scrape_interval: str = "2s"
    network: network.LabNetwork = field(default_factory=network.LabNetwork)


@dataclass
class Lab:
    options: LabOptions
    stopping: threading.Event = field(default_factory=threading.Event)
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    commands: dict[str, tuple[list[str], Path]] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)

    # ----- lifecycle

    @contextlib.contextmanager
    def running(self) -> Iterator[Lab]:
        with contextlib.ExitStack() as stack:
            stack.callback(self._stop_processes)
            self._check_machine()
            self._clean_folder()
            stack.callback(self.options.network.remove)
            self.options.network.bring_up()
            prepare_mount_points()
            self.server = ApiServer(self.options.programs.resolve(), self.folder / "host",
                                    controllers=True, scheduler=True,
                                    address=self.options.network.gateway)
            self.server.start()
            stack.callback(self.server.stop)
            self.host = self.server.adapter()
            stack.callback(self.host.close)
            self._write_host_kubeconfig()
            host.add_fleet(self.host, host.fleet_nodes(self.options.nodes))
            self.gpus = GpuScheduling(self.server, self.folder / "gpu",
                                      programs=self.options.programs.resolve(),
                                      crds=self.options.kai_crds.resolve(), all_nodes=False,
                                      isolate=self._isolated)
            stack.callback(self.gpus.stop)
            self.gpus.start()
            self._start_exporter(stack)
            self._start_runner(stack)
            self.proxy = ConnectProxy(self.runner.routes).start()
            stack.callback(self.proxy.shutdown)
            # After the proxy: machines of private-nodes clusters join through it.
            self._start_machines(stack)
            chart_repo = stack.enter_context(charts.served(self.options.charts.resolve()))
            self._start_mail(stack)
            self._start_portal(chart_repo)
            self._start_prometheus(stack)
            self._write_env()
            yield self

    @property
    def folder(self) -> Path:
        return self.options.folder.resolve()

    def _check_machine(self) -> None:
        if os.geteuid() != 0:
            raise LabError("the lab needs root: each virtual cluster's control plane gets a "
                           "network and mount namespace of its own (ip netns, mount)")
        missing = [p for p in REQUIRED_PROGRAMS if not (self.options.programs / p).exists()]
        if missing:
            raise LabError(f"missing in {self.options.programs}: {', '.join(missing)}; "
                           "`make tools` builds them")
        if not (self.options.charts / "index.yaml").is_file():
            raise LabError(f"no chart repository in {self.options.charts}: `make tools`")
        if not list(self.options.metal3_crds.glob("*.yaml")):
            raise LabError(f"no Metal3 CRDs in {self.options.metal3_crds}: `make tools`")

    def _clean_folder(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)
        self.folder.mkdir(parents=True)
        self.folder.chmod(0o700)

    def _isolated(self, program: str, argv: list[str]) -> list[str]:
        if program != "podgroupcontroller":
            return argv
        own = self.options.network.pod(PODGROUPCONTROLLER_NETWORK)
        return own.create().command(argv)

    def _start_machines(self, stack: contextlib.ExitStack) -> None:
        """The baremetal-operator (fixture provisioner) on the host's machines namespace, and
        the play of its provisioned machines booting into Nodes."""
        self.metal3 = BareMetalOperator(self.server, self.folder / "metal3",
                                        machines.MACHINES_NAMESPACE,
                                        programs=self.options.programs.resolve(),
                                        crds=self.options.metal3_crds.resolve())
        stack.callback(self.metal3.stop)
        self.metal3.start()
        for obj in machines.bootstrap_rbac():
            self.host.apply(obj, force=True)
        admin = self.server.adapter()
        kwoks = VirtualKwoks((self.options.programs / "kwok").resolve(),
                             self.folder / "machines", self.proxy.url)
        self.machine_boots = machines.MachineBoots(admin, proxy=self.proxy.url, kwoks=kwoks)
        thread = threading.Thread(target=self.machine_boots.run,
                                  args=(self.stopping,), name="machine-boots", daemon=True)
        thread.start()

        def stop_boots() -> None:
            self.stopping.set()
            thread.join(10)
            kwoks.stop()
            admin.close()
        stack.callback(stop_boots)

    def _start_runner(self, stack: contextlib.ExitStack) -> None:
        access = HostAccess(self.options.network, self.server.port, self.server.ca.cert_pem)
        self.runner = PodRunner(self.server.adapter(), access, self.folder / "runner",
                                self.options.programs.resolve())
        self.runner.register_node()
        thread = threading.Thread(target=self.runner.run, args=(self.stopping,),
                                  name="pod-runner", daemon=True)
        thread.start()

        def stop_runner() -> None:
            self.stopping.set()
            thread.join(60)
        stack.callback(stop_runner)

    # ----- telemetry

    def _start_exporter(self, stack: contextlib.ExitStack) -> None:
        """The DCGM exporter a GPU node would run, played for kwok's fleet, on its own
        connection to the host."""
        adapter = bounded_adapter(self.server.admin_kubeconfig)
        try:
            self.dcgm = PlayedDcgmExporter(adapter, "127.0.0.1", self.options.dcgm_port).start()
        except OSError as error:
            adapter.close()
            raise LabError(f"the DCGM exporter's port {self.options.dcgm_port}: "
                           f"{error.strerror or error}") from error
        stack.callback(self.dcgm.stop)

    def _scrape_jobs(self) -> list[ScrapeJob]:
        return [ScrapeJob("portal-web", [f"127.0.0.1:{self.options.metrics_port}"]),
                ScrapeJob("portal-worker", [f"127.0.0.1:{self.options.worker_metrics_port}"]),
                ScrapeJob("dcgm-exporter", [f"127.0.0.1:{self.options.dcgm_port}"])]

    def _start_prometheus(self, stack: contextlib.ExitStack) -> None:
        """A real Prometheus scraping the portal's two addresses and the exporter, with the
        portal's alert rules; not among ``self.processes``: a walk may stop it on purpose."""
        prometheus = PrometheusProcess(
            (self.options.programs / "prometheus").resolve(), self.folder / "prometheus",
            f"127.0.0.1:{self.options.prometheus_port}", self._scrape_jobs(),
            self.options.scrape_interval, [self.options.rules.resolve()])
        self.telemetry = Telemetry(prometheus, PROMETHEUS_READY_SECONDS, TARGETS_UP_SECONDS)
        stack.callback(prometheus.stop)
        try:
            self.telemetry.start_prometheus()
        except PrometheusError as error:
            raise LabError(str(error)) from error

    @property
    def prometheus_url(self) -> str:
        return f"http://127.0.0.1:{self.options.prometheus_port}"

    # ----- the mail server

    @property
    def maildir(self) -> Path:
        return self.folder / "mail"

    def _start_mail(self, stack: contextlib.ExitStack) -> None:
        """aiosmtpd's own server, plain SMTP on loopback, each message into ``maildir``."""
        self.smtp_port = free_port()
        with (self.folder / "mail.log").open("ab") as log:
            server = subprocess.Popen(
                [sys.executable, "-m", "aiosmtpd", "-n", "-l", f"127.0.0.1:{self.smtp_port}",
                 "-c", "aiosmtpd.handlers.Mailbox", str(self.maildir)],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True)
        stack.callback(terminate_all, [server])
        deadline = time.monotonic() + MAIL_READY_SECONDS
        while not _answers("127.0.0.1", self.smtp_port):
            if server.poll() is not None or time.monotonic() > deadline:
                raise LabError("the SMTP server did not start: see "
                               f"{self.folder / 'mail.log'}")
            time.sleep(0.2)

    # ----- the portal

    def _start_portal(self, chart_repo: str) -> None:
        for obj in host.portal_rbac(self.options.deploy_base):
            self.host.apply(obj, force=True)
        webhook_port = free_port()
        (self.folder / "webhook-certs").mkdir(mode=0o700)
        webhook_url = f"https://127.0.0.1:{webhook_port}"
        self.portal_url = f"http://127.0.0.1:{self.options.port}"
        self.env = self._portal_env(chart_repo, webhook_url)
        self._spawn("portal", ["dev", "--no-simulate", "--port", str(self.options.port),
                               "--idp-port", str(self.options.idp_port),
                               "--database", str(self.folder / "portal.db")],
                    self._kubeconfig_for(host.WORKER_ACCOUNT))
        self._wait_for_portal()
        # After the portal: `portal dev` migrates the database the webhook checks at its start.
        self._spawn("webhook", ["webhook", "--host", "127.0.0.1", "--port", str(webhook_port),
                                "--cert-dir", str(self.folder / "webhook-certs")],
                    self._kubeconfig_for(host.WEBHOOK_ACCOUNT))
        # Its health only, on loopback: its certificate is its own, checked by the host.
        self._wait_for_answer(f"{webhook_url}/healthz", "webhook", 90.0, verify=False)
        self.admin_token = self._admin_token()

    def _portal_env(self, chart_repo: str, webhook_url: str) -> dict[str, str]:
        selector = ",".join(f'"{k}":"{v}"' for k, v in NODE_LABELS.items())
        return {
            "PORTAL_DATABASE_URL": f"sqlite:///{self.folder / 'portal.db'}",
            "PORTAL_ENCRYPTION_KEY": Fernet.generate_key().decode(),
            "PORTAL_SECRET_KEY": secrets.token_urlsafe(32),
            "PORTAL_CLUSTER_ENDPOINT_TEMPLATE": ENDPOINT_TEMPLATE,
            "PORTAL_CONTROL_PLANE_NODE_SELECTOR": "{" + selector + "}",
            "PORTAL_HELM_BINARY": str((self.options.programs / "helm").resolve()),
            "PORTAL_VCLUSTER_CHART_REPO": chart_repo,
            "PORTAL_WEBHOOK_URL": webhook_url,
            "PORTAL_WEBHOOK_NAMESPACE": host.PORTAL_NAMESPACE,
            "PORTAL_WORKER_RESYNC_SECONDS": str(WORKER_RESYNC_SECONDS),
            # Sleep policies 2880 times faster: 5 idle minutes pass in 0.1 s, a day asleep in
            # 30 s, and a deletion is announced 15 s before (12 hours).
            "PORTAL_SLEEP_POLICY_SPEEDUP": str(SLEEP_POLICY_SPEEDUP),
            "PORTAL_SLEEP_DELETE_WARNING_HOURS": "12",
            "PORTAL_PROMETHEUS_URL": self.prometheus_url,
            "PORTAL_METRICS_ADDRESS": f"127.0.0.1:{self.options.metrics_port}",
            "PORTAL_WORKER_METRICS_ADDRESS": f"127.0.0.1:{self.options.worker_metrics_port}",
            "PORTAL_IDLE_GPU_WINDOW_MINUTES": str(IDLE_GPU_WINDOW_MINUTES),
            # An idle window on utilisation must hold two of the lab's scrapes, not two of 60 s.
            "PORTAL_UTILISATION_SCRAPE_SECONDS": self.options.scrape_interval.removesuffix("s"),
            "HTTPS_PROXY": self.proxy.url,
            "NO_PROXY": f"127.0.0.1,localhost,{self.options.network.gateway}",
            "HOME": str(self.folder / "home"),
            # Notifications to the lab's SMTP server: plain SMTP, which only loopback may be.
            "PORTAL_SMTP_HOST": "127.0.0.1",
            "PORTAL_SMTP_PORT": str(self.smtp_port),
            "PORTAL_SMTP_SECURITY": "none",
            "PORTAL_SMTP_FROM": MAIL_SENDER,
            "PORTAL_BASE_URL": self.portal_url,
        }

    def _kubeconfig_for(self, account: str) -> Path:
        token = self.host.request_token(host.PORTAL_NAMESPACE, account,
                                        expiration_seconds=TOKEN_SECONDS, bound_secret=None)
        path = self.folder / f"{account}.kubeconfig"
        path.write_text(self.server.kubeconfig_for(token=token))
        path.chmod(0o600)
        return path

    def restart(self, name: str) -> None:
        """The portal's process ``name`` again, as its supervisor would after a crash."""
        args, kubeconfig = self.commands[name]
        self._spawn(name, args, kubeconfig)
        self._wait_for_portal()

    def _spawn(self, name: str, args: list[str], kubeconfig: Path) -> None:
        self.commands[name] = (args, kubeconfig)
        (self.folder / "home").mkdir(exist_ok=True)
        with (self.folder / f"{name}.log").open("ab") as log:
            self.processes[name] = subprocess.Popen(
                [sys.executable, "-m", "app.process.cli", *args], stdout=log,
                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
                env={**os.environ, **self.env, "PORTAL_KUBECONFIG": str(kubeconfig)})

    def _wait_for_portal(self, timeout: float = 90.0) -> None:
        self._wait_for_answer(f"{self.portal_url}/healthz", "portal", timeout)

    def _wait_for_answer(self, url: str, name: str, timeout: float, *,
                         verify: bool = True) -> None:
        """Until ``url`` answers 2xx; fails at once if one of the lab's processes exited."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for spawned, process in self.processes.items():
                if process.poll() is not None:
                    raise LabError(f"{spawned} exited: see {self.folder / (spawned + '.log')}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(url, timeout=1, trust_env=False, verify=verify).is_success:
                    return
            time.sleep(0.3)
        raise LabError(f"the {name} did not answer within {timeout:.0f}s: "
                       f"see {self.folder / (name + '.log')}")

    def _admin_token(self) -> str:
        env = {**os.environ, **self.env}
        portal = [sys.executable, "-m", "app.process.cli"]
        subprocess.run([*portal, "users", "make-admin", PLATFORM_ADMIN], env=env, check=True,
                       capture_output=True)
        made = subprocess.run([*portal, "tokens", "create", PLATFORM_ADMIN, "--scope", "admin",
                               "--scope", "write", "--scope", "read", "--name", "lab",
                               "--expires-in", "30d"],
                              env=env, check=True, capture_output=True, text=True)
        return made.stdout.strip()

    # ----- what a person reads

    def _write_host_kubeconfig(self) -> None:
        self.host_kubeconfig = self.server.write_admin_kubeconfig(self.folder / "host.kubeconfig")

    def _write_env(self) -> None:
        lines = {
            "PORTAL_URL": self.portal_url,
            "HOST_KUBECONFIG": str(self.host_kubeconfig),
            "PORTAL_TOKEN": self.admin_token,
            "HTTPS_PROXY": self.proxy.url,
            "NO_PROXY": self.env["NO_PROXY"],
            "KUBECTL": str((self.options.programs / "kubectl").resolve()),
            "PROMETHEUS_URL": self.prometheus_url,
            "MAILDIR": str(self.maildir),
        }
        path = self.folder / "env"
        path.write_text("".join(f"{key}={value}\n" for key, value in lines.items()))
        path.chmod(0o600)

    def summary(self) -> str:
        return "\n".join([
            f"GPU Tenant Portal lab: {self.portal_url}",
            "  sign in as admin@example.com (platform admin), alice@example.com or "
            "bob@example.com: type the address on the local sign-in page (no password)",
            f"  host cluster: KUBECONFIG={self.host_kubeconfig} "
            f"{self.options.programs / 'kubectl'} get nodes",
            "  virtual clusters are reached through the lab's proxy: "
            f"export HTTPS_PROXY={self.proxy.url} NO_PROXY={self.env['NO_PROXY']}",
            f"  the same, and a platform-admin API token: {self.folder / 'env'}",
            f"  Prometheus: {self.prometheus_url} (jobs portal-web, portal-worker and "
            "dcgm-exporter, the lab's played DCGM exporter; the portal's alert rules)",
            f"  notification emails: SMTP 127.0.0.1:{self.smtp_port}, kept in the Maildir "
            f"{self.maildir}",
            "  the four teams: `make lab-demo` in another shell. Ctrl-C stops the lab.",
        ])

    def _stop_processes(self) -> None:
        terminate_all(self.processes.values(), timeout=15.0)


def _answers(host: str, port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=1):
        return True
    return False
