"""Start JupyterLab on the course's notebooks, with the course's Python as the kernel.

JupyterLab does almost all of it: it picks a free port (``--ServerApp.port=0``), makes a token and
writes both to its server-info file (``jpserver-<pid>.json``), prints the URL, opens the browser,
stops on Ctrl-C or SIGTERM and shuts its kernels down first, and takes its settings, workspaces and
disabled extensions from folders that its own options name. This module adds only what the course
needs on top:

* the kernel is the interpreter running this module (``sys.executable``, the course's venv):
  JupyterLab runs under it, and ``JUPYTER_PREFER_ENV_PATH=1`` makes the venv's ``python3``
  kernelspec win over a user-level one; the checkout is on ``PYTHONPATH``, and
  ``TKCOURSE_SOLUTIONS`` is set or removed;
* ``main`` (``make lab``, ``tkcourse lab``): hands the terminal over to ``jupyter lab`` on
  ``notebooks/``, keeping the browser closed where there is no display to open one on;
* ``start_lab`` (the browser test): a server in the background that returns once it answers and
  stops, kernels included, on exit, killing whatever outlived it::

      with start_lab(solutions=True, isolated=True) as lab:
          page.goto(lab.url_for("notebooks/00_welcome.ipynb"))
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
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


class LabServer:
    """A running JupyterLab in the background; a context manager that stops it (and its kernels) on exit."""

    def __init__(self, process, *, root_dir: Path, notebook_dir: Path, runtime_dir: Path, log_path: Path,
                 tmp_dir: Path):
        self.process: subprocess.Popen = process
        self.root_dir, self.notebook_dir = root_dir, notebook_dir
        self.runtime_dir, self.log_path, self._tmp_dir = runtime_dir, log_path, tmp_dir
        self.info: dict = {}  # the server's own jpserver-<pid>.json: url, port, token, ...
        self._seen: dict[int, str] = {}  # pid -> name, every descendant seen while running
        self.leftovers: list[str] = []  # processes that outlived stop() (and were killed)

    # --- addresses -----------------------------------------------------------------------
    @property
    def base_url(self) -> str:
        return self.info["url"].rstrip("/")

    @property
    def port(self) -> int:
        return self.info["port"]

    @property
    def token(self) -> str:
        return self.info["token"]

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

    def api(self, path: str, method: str = "GET", timeout: float = 10.0):
        req = urllib.request.Request(f"{self.base_url}/api/{path.lstrip('/')}", method=method,
                                     headers={"Authorization": f"token {self.token}"})
        with urllib.request.urlopen(req, timeout=timeout) as r:
            body = r.read()
        return json.loads(body) if body else None

    def log_tail(self, n: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return "(no log)"

    # --- lifetime ------------------------------------------------------------------------
    def running(self) -> bool:
        return self.process.poll() is None

    def wait_ready(self, timeout: float = 90.0) -> LabServer:
        """Block until the server has written its info file and ``/api/status`` answers; else stop it and
        raise ``LabError``."""
        from jupyter_server.serverapp import list_running_servers

        deadline, last = time.monotonic() + timeout, None
        while time.monotonic() < deadline:
            if not self.running():
                self.stop()
                raise LabError(f"JupyterLab exited with code {self.process.returncode} before answering.\n"
                               f"{self.log_tail()}")
            self.info = next((s for s in list_running_servers(str(self.runtime_dir))
                              if s.get("pid") == self.process.pid), {})
            if self.info:
                try:
                    self.api("status", timeout=2)
                    return self
                except OSError as e:  # URLError and refused connections are OSErrors
                    last = e
            time.sleep(0.2)
        tail = self.log_tail()
        self.stop()
        raise LabError(f"JupyterLab did not answer within {timeout:.0f} s ({last or 'no server-info file'}).\n{tail}")

    def track_processes(self) -> None:
        """Remember the server's processes now (kernels included), so that stop() can make sure they end."""
        try:
            import psutil

            for p in psutil.Process(self.process.pid).children(recursive=True):
                self._seen.setdefault(p.pid, p.name())
        except Exception:  # psutil missing, or the process is gone
            pass

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM the server (Jupyter shuts its kernels down, then exits), then kill whatever outlived it."""
        if self.running():
            self.track_processes()  # kernels run in sessions of their own: remember them by pid
            self.process.terminate()
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)
        self.leftovers = self._kill_seen(timeout)
        if self._tmp_dir:
            shutil.rmtree(self._tmp_dir, ignore_errors=True)
            self._tmp_dir = None

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
        _, still = psutil.wait_procs(alive, timeout=min(timeout, 5))
        for p in still:
            try:
                p.kill()
            except psutil.Error:
                pass
        psutil.wait_procs(still, timeout=5)
        return [f"{p.pid} {self._seen.get(p.pid)}" for p in still]

    def __enter__(self) -> LabServer:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"LabServer({self.info.get('url', 'starting')}, root_dir={self.root_dir}, pid={self.process.pid})"


def _resolve_dirs(notebook_dir, root_dir=None) -> tuple[Path, Path]:
    """The notebook folder, and the server's root: the repo when the folder is inside it (URLs then read
    ``/lab/tree/notebooks/...`` and the file browser shows ``exercises/`` too), else the folder."""
    nb = Path(notebook_dir)
    nb = (nb if nb.is_absolute() else REPO_ROOT / nb).resolve()
    if root_dir is None:
        root_dir = REPO_ROOT if nb == REPO_ROOT or REPO_ROOT in nb.parents else nb
    return nb, Path(root_dir).resolve()


def _command(root: Path, solutions: bool, port: int | None) -> tuple[list[str], dict]:
    """``jupyter lab`` under this interpreter, and its environment: what both ways of starting share."""
    env = dict(os.environ)
    env["JUPYTER_PREFER_ENV_PATH"] = "1"  # the venv's python3 kernelspec before any user-level one
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH")) if p)
    env.pop("JPY_SESSION_NAME", None)
    if solutions:
        env["TKCOURSE_SOLUTIONS"] = "1"
    else:
        env.pop("TKCOURSE_SOLUTIONS", None)
    cmd = [sys.executable, "-m", "jupyter", "lab", "--ServerApp.ip=127.0.0.1", f"--ServerApp.root_dir={root}"]
    if port is not None:
        cmd += [f"--ServerApp.port={port}", "--ServerApp.port_retries=0"]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        cmd.append("--allow-root")  # containers and CI run as root
    return cmd, env


def _isolate(tmp: Path, env: dict, disabled_extensions) -> list[str]:
    """Fresh config, settings, workspaces and checkpoints under ``tmp``: the user's JupyterLab state is not used."""
    config, settings = tmp / "config", tmp / "settings"
    (config / "labconfig").mkdir(parents=True)
    disabled = {name: True for name in (*_QUIET_PLUGINS, *disabled_extensions)}
    (config / "labconfig" / "page_config.json").write_text(json.dumps({"disabledExtensions": disabled}))
    for rel, value in _ISOLATED_SETTINGS.items():
        (settings / rel).parent.mkdir(parents=True, exist_ok=True)
        (settings / rel).write_text(json.dumps(value))
    env["JUPYTER_CONFIG_DIR"] = str(config)
    return [f"--LabApp.user_settings_dir={settings}", f"--LabApp.workspaces_dir={tmp / 'workspaces'}",
            f"--FileCheckpoints.checkpoint_dir={tmp / 'checkpoints'}"]  # no .ipynb_checkpoints/ in the repo


def start_lab(notebook_dir="notebooks", port=None, *, solutions=False, root_dir=None, isolated=False,
              disabled_extensions=(), expose_app=False, timeout=90.0, wait=True) -> LabServer:
    """Start ``jupyter lab`` on 127.0.0.1 in the background and return once ``/api/status`` answers.

    ``notebook_dir``: folder to open (relative to the repo root). ``port``: the OS picks a free one when
    None. ``solutions``: kernels see ``TKCOURSE_SOLUTIONS=1`` (exercises resolve to the solutions);
    False removes it. ``isolated``: fresh Jupyter config, settings and workspaces in a temp dir (the
    user's settings and disabled extensions do not apply; no news pop-ups; every cell kept in the DOM),
    with ``disabled_extensions`` switched off there. ``expose_app``: ``window.jupyterapp`` in the page
    (for tests). The server's log goes to ``.log_path``. ``wait=False``: return at once; call
    ``.wait_ready()`` before using it (lets a caller start several servers side by side).
    """
    nb_dir, root = _resolve_dirs(notebook_dir, root_dir)
    if not nb_dir.is_dir():
        raise FileNotFoundError(f"no notebook folder {nb_dir}")
    if disabled_extensions and not isolated:
        raise ValueError("disabled_extensions needs isolated=True (it is written to a temporary config dir)")
    tmp = Path(tempfile.mkdtemp(prefix="tkcourse-lab-"))
    cmd, env = _command(root, solutions, 0 if port is None else port)
    env["JUPYTER_RUNTIME_DIR"] = str(tmp / "runtime")  # where this server's info file (and only its) lands
    cmd += ["--no-browser"] + (_isolate(tmp, env, disabled_extensions) if isolated else [])
    if expose_app:
        cmd.append("--LabApp.expose_app_in_browser=True")
    log_path = tmp / "lab.log"
    with open(log_path, "wb") as out:
        proc = subprocess.Popen(cmd, cwd=root, env=env, stdin=subprocess.DEVNULL, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
    lab = LabServer(proc, root_dir=root, notebook_dir=nb_dir, runtime_dir=tmp / "runtime", log_path=log_path,
                    tmp_dir=tmp)
    return lab.wait_ready(timeout) if wait else lab


def _has_display() -> bool:
    """A graphical browser can open here (else Python's webbrowser might start a text browser in this terminal)."""
    return sys.platform in ("darwin", "win32") or bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))


def main(argv: list[str] | None = None) -> int:
    """``make lab``: JupyterLab in the foreground on notebooks/ until Ctrl-C."""
    ap = argparse.ArgumentParser(prog="python -m tkcourse.lab", description=main.__doc__)
    ap.add_argument("--port", type=int, default=None, help="default: a free port")
    ap.add_argument("--no-browser", action="store_true", help="only print the URL")
    ap.add_argument("--solutions", action="store_true",
                    help="exercises resolve to the reference solutions (TKCOURSE_SOLUTIONS=1)")
    ap.add_argument("--notebook-dir", default="notebooks")
    args = ap.parse_args(argv if argv is not None else [])
    nb_dir, root = _resolve_dirs(args.notebook_dir)
    if not nb_dir.is_dir():
        print(f"Could not start JupyterLab: no notebook folder {nb_dir}", file=sys.stderr)
        return 1
    cmd, env = _command(root, args.solutions, args.port)
    rel = nb_dir.relative_to(root).as_posix()
    cmd.append("--LabApp.default_url=/lab" + (f"/tree/{urllib.parse.quote(rel)}" if rel != "." else ""))
    if args.no_browser or not _has_display():
        cmd.append("--no-browser")
    print(f"Kernel: {sys.executable}{'  (solutions mode)' if args.solutions else ''}\n"
          "On a remote machine, tunnel the port JupyterLab prints below first: ssh -L PORT:127.0.0.1:PORT <host>",
          flush=True)
    os.chdir(root)
    os.execvpe(cmd[0], cmd, env)  # JupyterLab takes over this process: its Ctrl-C, its exit status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
