"""Start JupyterLab on the course's notebooks, with the course's Python as the kernel.

Used by ``make lab`` / ``python -m tkcourse.lab`` / ``tkcourse lab`` (``main``: in the foreground,
opening ``notebooks/`` and printing the URL with its token) and by the browser test
(``start_lab``: a context manager that returns once the server answers, and stops the whole
server, kernels included, on exit)::

    with start_lab(solutions=True) as lab:
        page.goto(lab.url_for("notebooks/00_welcome.ipynb"))

The kernel is the interpreter running this module (``sys.executable``, the course's venv):
JupyterLab runs under it, the ``python3`` kernelspec's ``python`` is resolved to it, and
``JUPYTER_PREFER_ENV_PATH=1`` makes the venv's kernelspec win over a user-level one.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]

#: Lab plugins switched off in ``isolated`` mode: nothing that pops up or fetches from the internet.
_QUIET_PLUGINS = ("@jupyterlab/apputils-extension:announcements",)

#: User settings written in ``isolated`` mode: every cell in the DOM (no windowing), no autosave, no news toasts.
_ISOLATED_SETTINGS = {
    "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none"},
    # never write a test's executed notebook back over the course's file
    "@jupyterlab/docmanager-extension/plugin.jupyterlab-settings": {"autosave": False},
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {
        "fetchNews": "false",
        "checkForUpdates": False,
    },
}


class LabError(RuntimeError):
    """JupyterLab did not start (the message ends with the tail of its log)."""


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _descendants(pid: int) -> list:
    """Live descendants of ``pid`` (psutil processes; [] when psutil is missing or pid is gone)."""
    try:
        import psutil

        return psutil.Process(pid).children(recursive=True)
    except Exception:
        return []


class LabServer:
    """A running JupyterLab; a context manager that stops it (and its kernels) on exit."""

    def __init__(self, process, *, port, token, root_dir: Path, notebook_dir: Path, log_path, host="127.0.0.1",
                 tmp_dir=None):
        self.process: subprocess.Popen = process
        self.host = host
        self.port: int = port
        self.token: str = token
        self.root_dir = root_dir
        self.notebook_dir = notebook_dir
        self.log_path = log_path
        self._tmp_dir = tmp_dir
        self._seen: dict[int, str] = {}  # pid -> name, every descendant seen while running
        self.leftovers: list[str] = []  # processes that outlived stop() (and were killed)

    # --- addresses -----------------------------------------------------------------------
    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def url_for(self, path: str | os.PathLike = "", workspace: str | None = None) -> str:
        """The browser URL (with token) opening ``path`` (a file or folder; relative to root_dir or absolute).

        ``workspace``: a JupyterLab workspace name, so that a page does not reopen what another one had open.
        """
        p = Path(path)
        if p.is_absolute():
            p = p.resolve().relative_to(self.root_dir)
        rel = "" if p.as_posix() == "." else urllib.parse.quote(p.as_posix())
        lab = f"{self.base_url}/lab" + (f"/workspaces/{urllib.parse.quote(workspace)}" if workspace else "")
        return f"{lab}/tree/{rel}?token={self.token}" if rel else f"{lab}?token={self.token}"

    @property
    def url(self) -> str:
        """The URL (with token) opening the notebook folder."""
        return self.url_for(self.notebook_dir)

    # --- REST API ------------------------------------------------------------------------
    def api(self, path: str, method: str = "GET", timeout: float = 10.0):
        req = urllib.request.Request(f"{self.base_url}/api/{path.lstrip('/')}", method=method,
                                     headers={"Authorization": f"token {self.token}"})
        with urllib.request.urlopen(req, timeout=timeout) as r:
            body = r.read()
        return json.loads(body) if body else None

    def log_tail(self, n: int = 40) -> str:
        try:
            return "\n".join(Path(self.log_path).read_text(errors="replace").splitlines()[-n:])
        except (OSError, TypeError):
            return "(no log: JupyterLab writes to the terminal)"

    def kernel_problems(self) -> list[str]:
        """Why the default kernel might not be this Python ([] when it is)."""
        try:
            specs = self.api("kernelspecs")
        except Exception as e:  # pragma: no cover - server just answered /api/status
            return [f"could not list kernelspecs: {e}"]
        default = specs.get("default")
        spec = specs.get("kernelspecs", {}).get(default, {}).get("spec", {})
        argv0 = (spec.get("argv") or [""])[0]
        if default != "python3":
            return [f"the default kernel is {default!r}, not 'python3'"]
        if argv0 in ("python", "python3", f"python{sys.version_info[0]}.{sys.version_info[1]}"):
            return []  # jupyter_client runs sys.executable for these
        if os.path.abspath(argv0) != os.path.abspath(sys.executable):
            return [f"the 'python3' kernel runs {argv0}, not the course's {sys.executable} "
                    f"(remove the conflicting kernelspec shown by `{sys.executable} -m jupyter kernelspec list`)"]
        return []

    # --- lifetime ------------------------------------------------------------------------
    def track_processes(self) -> None:
        """Remember the server's processes now (kernels included), so that stop() can make sure they end."""
        for p in _descendants(self.process.pid):
            try:
                self._seen.setdefault(p.pid, p.name())
            except Exception:
                pass

    def wait_ready(self, timeout: float = 90.0) -> LabServer:
        """Block until ``/api/status`` answers (for ``start_lab(wait=False)``); stops the server and raises LabError if not."""
        try:
            _wait_ready(self, timeout)
        except LabError:
            self.stop()
            raise
        return self

    def running(self) -> bool:
        return self.process.poll() is None

    def stop(self, timeout: float = 10.0) -> None:
        """Shut the kernels down, end the server's process group, and kill whatever outlived it."""
        if self.running():
            self.track_processes()
            try:  # kernels run in sessions of their own: ask the server to shut them down first
                for k in self.api("kernels", timeout=3):
                    self.api(f"kernels/{k['id']}", method="DELETE", timeout=5)
            except Exception:
                pass
            self.track_processes()
            self._signal_group(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self._signal_group(signal.SIGKILL)
                self.process.wait(5)
        self._signal_group(signal.SIGKILL)  # stragglers in the group (no-op when empty)
        self.leftovers = self._kill_seen(timeout)
        if self._tmp_dir:
            shutil.rmtree(self._tmp_dir, ignore_errors=True)
            self._tmp_dir = None

    def _signal_group(self, sig) -> None:
        try:
            os.killpg(self.process.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def _kill_seen(self, timeout: float) -> list[str]:
        try:
            import psutil
        except ImportError:  # pragma: no cover
            return []
        alive = []
        for pid, name in self._seen.items():
            try:
                p = psutil.Process(pid)
                if p.name() == name and p.status() != psutil.STATUS_ZOMBIE:
                    alive.append(p)
            except psutil.Error:
                pass
        if not alive:
            return []
        gone, still = psutil.wait_procs(alive, timeout=min(timeout, 5))
        left = [f"{p.pid} {self._seen.get(p.pid)}" for p in still]
        for p in still:
            try:
                p.kill()
            except psutil.Error:
                pass
        psutil.wait_procs(still, timeout=5)
        return left

    def __enter__(self) -> LabServer:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"LabServer({self.base_url}, root_dir={self.root_dir}, pid={self.process.pid})"


def _resolve_dirs(notebook_dir, root_dir) -> tuple[Path, Path]:
    nb = Path(notebook_dir)
    nb = (nb if nb.is_absolute() else REPO_ROOT / nb).resolve()
    if root_dir is None:
        root_dir = REPO_ROOT if nb == REPO_ROOT or REPO_ROOT in nb.parents else nb
    return nb, Path(root_dir).resolve()


def _isolate(tmp: Path, env: dict, disabled_extensions) -> list[str]:
    """Fresh config/settings/workspaces/runtime/checkpoints under ``tmp``: the user's own JupyterLab state is not used."""
    config, settings, workspaces, runtime = (tmp / d for d in ("config", "settings", "workspaces", "runtime"))
    for d in (config / "labconfig", settings, workspaces, runtime):
        d.mkdir(parents=True, exist_ok=True)
    disabled = {name: True for name in (*_QUIET_PLUGINS, *disabled_extensions)}
    (config / "labconfig" / "page_config.json").write_text(json.dumps({"disabledExtensions": disabled}))
    for rel, value in _ISOLATED_SETTINGS.items():
        f = settings / rel
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(json.dumps(value))
    env["JUPYTER_CONFIG_DIR"] = str(config)
    env["JUPYTER_RUNTIME_DIR"] = str(runtime)
    return [f"--LabApp.user_settings_dir={settings}", f"--LabApp.workspaces_dir={workspaces}",
            f"--FileCheckpoints.checkpoint_dir={tmp / 'checkpoints'}"]  # no .ipynb_checkpoints/ in the repo


def start_lab(notebook_dir="notebooks", port=None, token=None, open_browser=False, *, solutions=False,
              root_dir=None, isolated=False, disabled_extensions=(), expose_app=False, quiet=True,
              extra_args=(), timeout=90.0, wait=True) -> LabServer:
    """Start ``python -m jupyter lab`` on 127.0.0.1 and return once ``/api/status`` answers.

    ``notebook_dir``: folder to open (relative to the repo root). The server's root is the repo root
    when the folder is inside the repo (so URLs read ``/lab/tree/notebooks/...``), else the folder.
    ``port``/``token``: free port / random token when None. ``open_browser``: open the folder in the
    default browser once up. ``solutions``: kernels see ``TKCOURSE_SOLUTIONS=1`` (exercises resolve
    to the solutions); False removes it. ``isolated``: fresh Jupyter config, settings, workspaces
    and runtime dirs in a temp dir (the user's settings and disabled extensions do not apply; no
    news pop-ups; every cell kept in the DOM), with ``disabled_extensions`` switched off there.
    ``expose_app``: ``window.jupyterapp`` in the page (for tests). ``quiet``: the server's log goes
    to a file (``.log_path``) instead of this terminal. ``wait=False``: return at once (no port
    retry); call ``.wait_ready()`` before using it (lets a caller start several servers side by side).
    """
    nb_dir, root = _resolve_dirs(notebook_dir, root_dir)
    if not nb_dir.is_dir():
        raise FileNotFoundError(f"no notebook folder {nb_dir}")
    token = token or secrets.token_hex(24)
    tmp = Path(tempfile.mkdtemp(prefix="tkcourse-lab-"))

    env = dict(os.environ)
    env["JUPYTER_TOKEN"] = token  # not on the command line, where `ps` would show it to everyone
    env["JUPYTER_PREFER_ENV_PATH"] = "1"  # the venv's python3 kernelspec before any user-level one
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH")) if p)
    env.pop("JPY_SESSION_NAME", None)
    if solutions:
        env["TKCOURSE_SOLUTIONS"] = "1"
    else:
        env.pop("TKCOURSE_SOLUTIONS", None)
    args = list(extra_args)
    if isolated:
        args += _isolate(tmp, env, disabled_extensions)
    elif disabled_extensions:
        raise ValueError("disabled_extensions needs isolated=True (it is written to a temporary config dir)")
    if expose_app:
        args.append("--LabApp.expose_app_in_browser=True")
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        args.append("--allow-root")  # containers and CI run as root

    for attempt in range(3):  # a free port can be taken between finding it and binding it
        p = port or free_port()
        cmd = [sys.executable, "-m", "jupyter", "lab", "--no-browser", "--ServerApp.ip=127.0.0.1",
               f"--ServerApp.port={p}", "--ServerApp.port_retries=0", f"--ServerApp.root_dir={root}", *args]
        log_path = tmp / f"lab-{attempt}.log" if quiet else None
        out = open(log_path, "wb") if quiet else None
        try:
            proc = subprocess.Popen(cmd, cwd=root, env=env, stdin=subprocess.DEVNULL, stdout=out,
                                    stderr=subprocess.STDOUT if quiet else None, start_new_session=True)
        finally:
            if out:
                out.close()
        lab = LabServer(proc, port=p, token=token, root_dir=root, notebook_dir=nb_dir, log_path=log_path,
                        tmp_dir=tmp)
        if not wait:
            return lab
        try:
            _wait_ready(lab, timeout)
        except LabError:
            retry = port is None and not lab.running() and "already in use" in lab.log_tail()
            lab._tmp_dir = None if retry else tmp  # keep the dir for the next attempt
            lab.stop()
            if retry and attempt < 2:
                continue
            raise
        if open_browser and _has_display():
            import webbrowser

            webbrowser.open(lab.url)
        return lab
    raise LabError("unreachable")  # pragma: no cover


def _has_display() -> bool:
    """A graphical browser can open here (else webbrowser might start a text browser in this terminal)."""
    return sys.platform in ("darwin", "win32") or bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))


def _wait_ready(lab: LabServer, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        if not lab.running():
            raise LabError(f"JupyterLab exited with code {lab.process.returncode} before answering.\n"
                           f"{lab.log_tail()}")
        try:
            lab.api("status", timeout=2)
            return
        except (urllib.error.URLError, ConnectionError, OSError, ValueError) as e:
            last = e
        time.sleep(0.2)
    tail = lab.log_tail()
    raise LabError(f"JupyterLab did not answer {lab.base_url}/api/status within {timeout:.0f} s ({last}).\n{tail}")


def main(argv: list[str] | None = None) -> int:
    """``make lab``: JupyterLab in the foreground on notebooks/ until Ctrl-C."""
    ap = argparse.ArgumentParser(prog="python -m tkcourse.lab", description=main.__doc__)
    ap.add_argument("--port", type=int, default=None, help="default: a free port")
    ap.add_argument("--no-browser", action="store_true", help="only print the URL")
    ap.add_argument("--solutions", action="store_true",
                    help="exercises resolve to the reference solutions (TKCOURSE_SOLUTIONS=1)")
    ap.add_argument("--notebook-dir", default="notebooks")
    args = ap.parse_args(argv if argv is not None else [])
    try:
        lab = start_lab(args.notebook_dir, port=args.port, open_browser=not args.no_browser,
                        solutions=args.solutions, quiet=False)
    except (LabError, FileNotFoundError) as e:
        print(f"Could not start JupyterLab: {e}", file=sys.stderr)
        return 1
    def _interrupt(signum, frame):  # a closed terminal or `kill` stops the server as Ctrl-C does
        raise KeyboardInterrupt

    for sig in (signal.SIGTERM, getattr(signal, "SIGHUP", None)):
        if sig is not None:
            signal.signal(sig, _interrupt)
    with lab:
        for problem in lab.kernel_problems():
            print(f"WARNING: {problem}", file=sys.stderr)
        print(f"\n  JupyterLab is running; open the course at\n\n    {lab.url}\n\n"
              f"  Kernel: {sys.executable}{'  (solutions mode)' if args.solutions else ''}\n"
              "  On a remote machine, tunnel the port first: ssh -L "
              f"{lab.port}:127.0.0.1:{lab.port} <host>\n  Press Ctrl-C to stop.\n", flush=True)
        try:
            while lab.running():
                time.sleep(0.5)
        except KeyboardInterrupt:
            print("\nStopping JupyterLab...", flush=True)
            return 0
    print(f"JupyterLab exited with code {lab.process.returncode}", file=sys.stderr)
    return lab.process.returncode or 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
