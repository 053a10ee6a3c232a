"""The runtime process: one IPython ``InteractiveShell`` serving framed requests on a Unix socket.

Started by the host as ``python _server.py '<json settings>'`` (inside bubblewrap when available). The first
process is the *zygote*: a clean shell that never runs user code; every notebook state is a ``fork()`` of the
zygote or of another state, so a branch costs only the pages it later writes (copy-on-write).

Process tree rules (why they look like this):
- the zygote is a child sub-reaper, and every forked runtime is re-parented to it (double fork), then asks for
  ``SIGKILL`` when the zygote dies: closing or evicting one state never kills its descendants, while the death
  of the zygote (or of the host, which the zygote follows) takes every runtime with it — no orphans;
- each runtime leads its own process group, so the host can kill a busy branch and whatever it spawned;
- the zygote reaps every exited runtime (SIGCHLD handler): no zombies.

Only the standard library and IPython are imported here; the frame format (``protocol.py``) and the limits
(``limits.py``) are loaded by path, and this folder is removed from ``sys.path`` so that user cells cannot import our
modules by accident.
"""
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
if sys.path and os.path.abspath(sys.path[0] or ".") == _HERE:
    sys.path.pop(0)

import builtins  # noqa: E402
import ctypes  # noqa: E402
import faulthandler  # noqa: E402
import gc  # noqa: E402
import importlib.util  # noqa: E402
import json  # noqa: E402
import re  # noqa: E402
import resource  # noqa: E402
import signal  # noqa: E402
import socket  # noqa: E402
import stat  # noqa: E402
import time  # noqa: E402
import traceback  # noqa: E402


def _load(name):
    spec = importlib.util.spec_from_file_location(f"_jupiter_sandbox_{name}", os.path.join(_HERE, f"{name}.py"))
    assert spec is not None and spec.loader is not None  # a .py path always has a source loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


protocol = _load("protocol")
limits = _load("limits")

_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36
_libc = ctypes.CDLL(None, use_errno=True)
# The reply to a cell when memory ran out outside the cell's own code (IPython's bookkeeping, the traceback, the
# reply's JSON): encoded now, so that sending it allocates nothing. The host reads it as the memory limit.
_OUT_OF_MEMORY_FRAME = protocol.encode_frame({
    "op": "result", "success": False, "execution_count": None, "duration_s": 0.0, "dropped_chars": 0,
    "ename": "MemoryError",
    "outputs": [{"output_type": "error", "ename": "MemoryError",
                 "evalue": "out of memory: the cell's result could not be reported", "traceback": []}],
})

class _Collector:
    """Outputs of one cell in nbformat shape, capped at ``cap`` characters (the rest is counted, not kept)."""

    def __init__(self, cap):
        self.cap = cap
        self.size = 0
        self.dropped = 0
        self.outputs = []

    def _take(self, n):
        if self.size + n <= self.cap:
            self.size += n
            return n
        room = max(0, self.cap - self.size)
        self.size += room
        self.dropped += n - room
        return room

    def stream(self, name, text):
        if not text:
            return
        kept = self._take(len(text))
        if not kept:
            return
        text = text[:kept]
        last = self.outputs[-1] if self.outputs else None
        if last is not None and last["output_type"] == "stream" and last["name"] == name:
            last["_chunks"].append(text)
        else:
            self.outputs.append({"output_type": "stream", "name": name, "_chunks": [text]})

    def rich(self, output):
        size = sum(len(v) if isinstance(v, str) else len(json.dumps(v)) for v in output.get("data", {}).values())
        if self.size + size > self.cap:
            self.dropped += size
            return
        self.size += size
        self.outputs.append(output)

    def error(self, ename, evalue, traceback):
        self.outputs.append({"output_type": "error", "ename": ename, "evalue": evalue, "traceback": list(traceback)})

    def clear(self):
        self.outputs = []

    def finish(self):
        done = []
        for out in self.outputs:
            if out["output_type"] == "stream":
                out = {"output_type": "stream", "name": out["name"], "text": "".join(out["_chunks"])}
            done.append(out)
        return done


_current = _Collector(0)


class _Stream:
    """sys.stdout / sys.stderr replacement that feeds the current collector."""

    encoding = "utf-8"
    errors = "replace"

    def __init__(self, name):
        self.name = name

    def write(self, text):
        if not isinstance(text, str):
            raise TypeError(f"write() argument must be str, not {type(text).__name__}")
        _current.stream(self.name, text)
        return len(text)

    def writelines(self, lines):
        for line in lines:
            self.write(line)

    def flush(self):
        return None

    def isatty(self):
        return False

    def readable(self):
        return False

    def writable(self):
        return True

    def fileno(self):
        import io

        raise io.UnsupportedOperation("the sandbox's captured output has no file descriptor")


def _no_input(*_args, **_kwargs):
    raise RuntimeError("input() is not available in the sandbox: cells cannot read from stdin")


def _make_shell():
    from IPython.core.displayhook import DisplayHook
    from IPython.core.displaypub import DisplayPublisher
    from IPython.core.interactiveshell import InteractiveShell
    from traitlets import Type
    from traitlets.config import Config

    class CapturingDisplayHook(DisplayHook):
        """Turns the last expression's value into an ``execute_result`` output."""

        def start_displayhook(self):
            self._pending = None

        def write_output_prompt(self):
            return None

        def write_format_data(self, format_dict, md_dict=None):
            self._pending = (format_dict, md_dict or {})

        def finish_displayhook(self):
            if self._pending is not None:
                data, meta = self._pending
                assert self.shell is not None  # set by the shell that made this hook
                _current.rich({"output_type": "execute_result", "execution_count": self.shell.execution_count,
                               "data": data, "metadata": meta})
            self._pending = None

    class CapturingDisplayPublisher(DisplayPublisher):
        """Turns ``display()`` calls (and inline figures) into ``display_data`` outputs."""

        def publish(self, data, metadata=None, source=None, *, transient=None, update=False, **_kw):
            _current.rich({"output_type": "display_data", "data": data, "metadata": metadata or {}})

        def clear_output(self, wait=False):
            _current.clear()

    class SandboxShell(InteractiveShell):
        displayhook_class = Type(CapturingDisplayHook)
        display_pub_class = Type(CapturingDisplayPublisher)

        def _showtraceback(self, etype, evalue, stb):
            _current.error(getattr(etype, "__name__", str(etype)), str(evalue), stb)

        def system(self, cmd):  # `!cmd` output must be captured like ipykernel does, not go to fd 1
            import subprocess

            proc = subprocess.run(self.var_expand(cmd, depth=1), shell=True, capture_output=True, text=True,
                                  errors="replace", check=False)
            _current.stream("stdout", proc.stdout)
            _current.stream("stderr", proc.stderr)
            self.user_ns["_exit_code"] = proc.returncode

        system_raw = system

    config = Config()
    config.HistoryManager.enabled = False
    shell = SandboxShell.instance(config=config)
    return shell


class Server:
    def __init__(self, settings):
        self.settings = settings
        self.cap = int(settings["output_cap"])
        self.conn = socket.socket(fileno=int(settings["fd"]))
        self.zygote_pid = os.getpid()
        self.pid = self.zygote_pid
        self.is_zygote = True
        self.single_fork = bool(settings.get("single_fork"))
        self.separate = bool(settings.get("separate_states"))
        self.view = _ViewPlan(settings) if self.separate else None
        self.level = 0  # user namespaces above this runtime's view (0: the zygote)
        self.needs_pdeathsig = False
        self.children = set()
        self.shell = _make_shell()
        self._fault_fd = None
        self._arm_faulthandler()

    # ---- process plumbing -------------------------------------------------------------------------------
    def _arm_faulthandler(self):
        """Crash reports go to an anonymous file (memfd) whose descriptor the host gets with the hello frame: no
        path on disk that a cell could swap for a link to a host file before it dies (the host used to read
        ``faults/<pid>.txt`` as root). A raw descriptor, not a Python file object: this runs on every branch's
        critical path."""
        if self._fault_fd is not None:
            os.close(self._fault_fd)
        try:
            self._fault_fd = os.memfd_create("jupiter-fault", os.MFD_CLOEXEC)
            faulthandler.enable(file=self._fault_fd)
        except OSError:
            self._fault_fd = None

    def _threads(self):
        try:
            return len(os.listdir("/proc/self/task"))
        except OSError:
            import threading

            return threading.active_count()

    def _fork(self, request, fds):
        """Fork this runtime into a new one served on ``fds[0]`` with working directory ``request['workspace']``.

        Inside bubblewrap (``single_fork``) the child stays our child: the PID namespace kills it with the
        zygote, and we reap it from a SIGCHLD handler that only waits for our own forks. Without bubblewrap it
        is double-forked so that the zygote (sub-reaper) becomes its parent, then it asks for SIGKILL when the
        zygote dies. The reply is sent without waiting for the child: it greets the host on its own socket.
        """
        threads = self._threads()
        if threads > 1:
            for fd in fds:
                os.close(fd)
            return {"ok": False, "reason": f"{threads} live threads: fork is unsafe"}
        if not fds:
            return {"ok": False, "reason": "no socket passed with the fork request"}
        if self.separate and self.level + 1 > _MAX_VIEW_LEVEL:
            for fd in fds:
                os.close(fd)
            return {"ok": False, "reason": f"a branch {self.level + 1} views deep passes the kernel's user "
                                           "namespace nesting limit: rebuild it from a shallower state"}
        double = not self.is_zygote and not self.single_fork
        gc.freeze()  # the child's collector then skips inherited objects: far fewer copy-on-write page faults
        try:
            pid = os.fork()
        except OSError as exc:
            # the process budget is full (EAGAIN) or memory is short: say so, instead of dying here and taking
            # the state (or, for the zygote, every state) with us
            for fd in fds:
                os.close(fd)
            return {"ok": False, "reason": f"fork failed: {exc.strerror}", "errno": exc.errno}
        finally:
            if os.getpid() == self.pid:
                gc.unfreeze()
        if pid == 0:
            try:
                if double and os.fork() != 0:
                    os._exit(0)
                self._become_child(request, fds[0], fds[1] if len(fds) > 1 else None, fds[2:],
                                   reparented=double or self.is_zygote)
            except BaseException:  # a half-born child must never return into the parent's loop
                try:  # its last words, for the host's error (``Zygote.died_starting``)
                    _report(("a new state failed before its hello: " + traceback.format_exc().strip()).encode())
                finally:
                    os._exit(70)
            return None
        for fd in fds:
            os.close(fd)
        if not self.is_zygote:
            self.children.add(pid)
        return {"ok": True}

    def _reap_own(self, _signum, _frame):
        """SIGCHLD in a runtime: reap only the runtimes we forked (never the cell's own subprocesses)."""
        for pid in list(self.children):
            try:
                done, status = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                done, status = pid, 0
            if done:
                self.children.discard(pid)
                _report_end(pid, status)

    def _become_child(self, request, fd, workspace_fd, join_fds, reparented):
        joined = _join_own_groups(join_fds)  # first: everything this state does from here on is counted there
        os.close(self.conn.detach())
        if self.is_zygote and self.settings.get("uid") is not None:
            _drop_to_cell_user(self.settings.get("rlimits", {}))
        self.level += 1
        # family and type given: else the socket asks the kernel for them (three system calls on the branch path)
        self.conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM, 0, fileno=fd)
        self.pid = os.getpid()
        self.children = set()
        if self.is_zygote:  # a state forked from a state inherits this very handler
            signal.signal(signal.SIGCHLD, self._reap_own)
        self.is_zygote = False
        self.needs_pdeathsig = reparented and not self.single_fork
        os.setpgid(0, 0)
        dest = request["workspace"]
        if workspace_fd is None:  # a host of an earlier version (a long run in progress) names the folder only
            if request.get("copy", True):
                os.mkdir(dest, 0o777)
            workspace_fd = os.open(dest, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        if request.get("copy", True):
            source = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            try:
                _copy_tree(source, workspace_fd)
            finally:
                os.close(source)
        if self.separate:
            _enter_own_view(self.view)
        elif self.settings.get("scope_signals"):
            _prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)  # Landlock asks for it (no setuid gains in cells)
        scoped = bool(self.settings.get("scope_signals")) and _scope_signals()
        os.close(workspace_fd)
        os.chdir(dest)
        os.environ["PWD"] = dest
        self._arm_faulthandler()
        fds = () if self._fault_fd is None else (self._fault_fd,)
        protocol.send_frame(self.conn, {"op": "hello", "pid": os.getpid(), "fault_fd": bool(fds), "joined": joined,
                                        "scoped": scoped}, fds=fds)

    def _settle(self):
        """Once the double fork finished (checked lazily, off the branch's critical path), ask for SIGKILL when
        the zygote dies."""
        if not self.needs_pdeathsig:
            return
        deadline = time.monotonic() + 10
        while os.getppid() != self.zygote_pid:
            if time.monotonic() > deadline:
                os._exit(71)
            time.sleep(0.0005)
        _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != self.zygote_pid:
            os._exit(72)
        self.needs_pdeathsig = False

    # ---- requests ---------------------------------------------------------------------------------------
    def _run(self, request):
        global _current
        _current = _Collector(self.cap)
        saved = sys.stdout, sys.stderr
        sys.stdout, sys.stderr = _Stream("stdout"), _Stream("stderr")
        started = time.monotonic()
        owner = os.getpid()
        try:
            result = self.shell.run_cell(request["code"], store_history=True, silent=False)
        finally:
            if os.getpid() != owner:  # a process the cell forked (os.fork) must never answer on our socket
                os._exit(0)
            sys.stdout, sys.stderr = saved
        collector, _current = _current, _Collector(0)
        error = result.error_before_exec or result.error_in_exec
        if error is not None and not any(o["output_type"] == "error" for o in collector.outputs):
            # IPython could not format the traceback (e.g. out of memory): report the exception plainly.
            lines = traceback.format_exception(type(error), error, error.__traceback__, limit=-3)
            collector.error(type(error).__name__, str(error), lines)
        return {
            "op": "result",
            "outputs": collector.finish(),
            "success": bool(result.success),
            "execution_count": result.execution_count,
            "duration_s": time.monotonic() - started,
            "dropped_chars": collector.dropped,
            "ename": None if error is None else type(error).__name__,
        }

    def _answer_run(self, request):
        """Run a cell and send its result. Running out of memory outside the cell used to end the process (the
        exception left ``serve``), which the host could only report as a death with no reason; now the reply
        encoded at start-up goes out instead. (The host replaces a runtime that hit the memory limit.)"""
        try:
            protocol.send_frame(self.conn, self._run(request))
        except MemoryError:
            self.conn.sendall(_OUT_OF_MEMORY_FRAME)

    def serve(self):
        while True:
            try:
                request, fds, _pid = protocol.recv_frame(self.conn, want_fds=True)
            except protocol.ConnectionClosed:
                os._exit(0)
            self._settle()
            op = request.get("op")
            if op == "run":
                self._answer_run(request)
                continue
            if op == "fork":
                reply = self._fork(request, fds)
                if reply is None:  # we are the new child: greet was sent, serve the new socket
                    continue
            elif op == "close":
                protocol.send_frame(self.conn, {"op": "closed"})
                os._exit(0)
            else:
                reply = {"op": "error", "message": f"unknown op {op!r}"}
            protocol.send_frame(self.conn, reply)


def _join_own_groups(fds):
    """Move this new state into its own cgroups: write ``0`` (this thread, the only one after ``fork``) into each
    ``tasks`` descriptor the host opened and sent with the fork request, then close it. A process that moves
    itself skips the kernel's RCU wait that the host's move costs (``sandbox.runtime.limits.StateGroup``). True when
    every move worked (the host checks, and moves the state itself otherwise)."""
    joined = bool(fds)
    for fd in fds:
        try:
            os.write(fd, b"0")
        except OSError:
            joined = False
        finally:
            os.close(fd)
    return joined


# Landlock (Linux 6.12+, ABI 6): a state's own domain, in which its processes can signal and trace only processes
# of the same domain or of domains made inside it (its branches, forked after it). syscall numbers are the same
# on every architecture that has them.
_SYS_LANDLOCK_CREATE_RULESET, _SYS_LANDLOCK_RESTRICT_SELF = 444, 446
_LANDLOCK_SCOPE_SIGNAL = 2


class _LandlockRuleset(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64),
                ("scoped", ctypes.c_uint64)]


def _scope_signals():
    """Enter a Landlock domain of this state's own that scopes signals (and, as every Landlock domain, ptrace and
    ``/proc/<pid>/root`` access) to it: ``kill(-1)`` in a cell reaches its own processes and its branches, not
    its siblings, its ancestors, the zygote or the host. Needs ``no_new_privs`` (set before). False where the
    kernel has no such Landlock or the 16 nested domains are used up (a state deeper than that keeps its
    parent's domain). The arguments are made once, at import (``_LANDLOCK_RULESET_ARGS``): see ``_ViewPlan``."""
    fd = _syscall(*_LANDLOCK_RULESET_ARGS)
    if fd < 0:
        return False
    try:
        return _syscall(_LANDLOCK_RESTRICT_SELF, ctypes.c_int(fd), _U32_ZERO) == 0
    finally:
        os.close(fd)


_syscall = _libc.syscall
_syscall.restype = ctypes.c_long
_U32_ZERO = ctypes.c_uint32(0)
_LANDLOCK_RULESET = _LandlockRuleset(0, 0, _LANDLOCK_SCOPE_SIGNAL)
_LANDLOCK_RULESET_ARGS = (ctypes.c_long(_SYS_LANDLOCK_CREATE_RULESET), ctypes.byref(_LANDLOCK_RULESET),
                          ctypes.c_size_t(ctypes.sizeof(_LANDLOCK_RULESET)), _U32_ZERO)
_LANDLOCK_RESTRICT_SELF = ctypes.c_long(_SYS_LANDLOCK_RESTRICT_SELF)


def _copy_tree(src_fd, dst_fd):
    """Copy a state's working folder into its branch's (both open folders): folders and files copied, symlinks
    (the read-only inputs) re-created as links, nothing followed. Descriptors, not paths: the branch's folder is
    one the host made and handed over, which need not be visible under its name from here. Lean on purpose: it
    runs in every new child, where each Python object it touches costs a copy-on-write page fault."""
    with os.scandir(src_fd) as entries:
        for entry in entries:
            name = entry.name
            if entry.is_symlink():
                os.symlink(os.readlink(name, dir_fd=src_fd), name, dir_fd=dst_fd)
                continue
            info = entry.stat(follow_symlinks=False)
            if entry.is_dir(follow_symlinks=False):
                os.mkdir(name, info.st_mode & 0o7777, dir_fd=dst_fd)
                sub_src = os.open(name, _DIR_FLAGS, dir_fd=src_fd)
                try:
                    sub_dst = os.open(name, _DIR_FLAGS, dir_fd=dst_fd)
                    try:
                        _copy_tree(sub_src, sub_dst)
                    finally:
                        os.close(sub_dst)
                finally:
                    os.close(sub_src)
            elif entry.is_file(follow_symlinks=False):
                _copy_file(name, src_fd, dst_fd, info)


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _copy_file(name, src_fd, dst_fd, info):
    source = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=src_fd)
    try:
        target = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, info.st_mode & 0o7777,
                         dir_fd=dst_fd)
        try:
            offset = 0
            while offset < info.st_size:
                sent = os.sendfile(target, source, offset, info.st_size - offset)
                if sent == 0:
                    break
                offset += sent
            os.utime(target, ns=(info.st_atime_ns, info.st_mtime_ns))
        finally:
            os.close(target)
    finally:
        os.close(source)


# ---- a state's own view of the file system (needs bubblewrap's layout) ---------------------------------------
_CLONE_NEWNS = 0x00020000
_CLONE_NEWUSER = 0x10000000
_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_REMOUNT, _MS_BIND, _MS_REC, _MS_PRIVATE = 1, 2, 4, 32, 4096, 16384, 1 << 18
_PR_SET_DUMPABLE, _PR_CAPBSET_DROP, _PR_SET_NO_NEW_PRIVS = 4, 24, 38
_MAX_VIEW_LEVEL = 30  # the kernel nests at most 32 user namespaces; keep a margin
_OWN_HOME = ".jupiter-home"  # a state's copy of HOME in its /tmp (``_enter_own_view``)


def _check(result, what):
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


_prctl = _libc.prctl
_prctl.argtypes = (ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong)
_unshare = _libc.unshare
_unshare.argtypes = (ctypes.c_int,)
_mount_call = _libc.mount
_mount_call.argtypes = (ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p)


def _mount(source, target, fstype, flags, data=None):
    """mount(2); every string argument is bytes already (``_ViewPlan``)."""
    if _mount_call(source, target, fstype, flags, data) != 0:
        _check(-1, f"mount {target.decode()}")


class _ViewPlan:
    """Everything a new state's own view needs that does not change from state to state, worked out once in the
    zygote: paths, mount options, the uid and gid maps (the cells' ids do not change below the zygote).

    Why: a new state runs on copy-on-write pages, and every Python object it makes or first touches costs it a
    page fault (several microseconds in a VM). Building these strings and ctypes objects (and the capability and
    Landlock structures, also made once) in each new state took ~80 page faults and ~0.5 ms of its ~1.7 ms view
    (measured with ``ru_minflt`` and ``perf_counter_ns`` between the steps); now the state makes the system calls."""

    def __init__(self, settings):
        uid, gid = os.geteuid(), os.getegid()
        self.id_maps = (("/proc/self/uid_map", f"{uid} {uid} 1".encode()), ("/proc/self/setgroups", b"deny"),
                        ("/proc/self/gid_map", f"{gid} {gid} 1".encode()))
        self.mount = settings["mount"]
        self.mount_b = self.mount.encode()
        self.home = settings["home"]
        self.home_b = self.home.encode()
        self.own_home_b = f"/tmp/{_OWN_HOME}".encode()
        # Host folders bubblewrap bound under /tmp (a checkout, a virtual environment or an interpreter that lives
        # there, read-only inputs): bound again into each state's fresh /tmp, never copied (a copy of a 3.7 GB
        # venv filled the new tmpfs and the state's memory cgroup, and the state died before its hello)
        self.binds = _mounts_under_tmp(self.mount)
        # not files of the cells: the sandbox folder's mount point, the parent's copy of HOME, the bound folders
        tops = {b"/tmp/" + os.path.relpath(path, b"/tmp").split(b"/")[0] for path, _ro, _is_dir in self.binds}
        self.skip = (os.path.relpath(self.mount, "/tmp").split("/")[0], _OWN_HOME,
                     *{os.path.basename(top).decode("utf-8", "surrogateescape") for top in tops})
        # the folders made to hold them (``/tmp/checkout`` around ``/tmp/checkout/.venv``) are read-only too, as
        # bubblewrap's own are: else a cell could write there, into its /tmp, what looks like the checkout's file
        self.read_only_tops = tuple(sorted(tops - {path for path, _ro, _is_dir in self.binds}))
        self.tmp_options = f"mode=1777,size={int(settings['tmp_mb'])}m".encode()
        self.shm_options = f"mode=1777,size={int(settings['shm_mb'])}m".encode()


def _mounts_under_tmp(sandbox_mount):
    """The topmost mount points strictly under ``/tmp`` of this mount namespace other than the sandbox folder's,
    as ``(path bytes, read-only, is a folder)`` (``/proc/self/mountinfo``; its octal escapes undone)."""
    sandbox_b = os.fsencode(sandbox_mount)
    found = []
    with open("/proc/self/mountinfo", "rb") as fh:
        for line in fh:
            fields = line.split(b" ")
            path = re.sub(rb"\\([0-7]{3})", lambda m: bytes([int(m.group(1), 8)]), fields[4])
            if not path.startswith(b"/tmp/") or path == sandbox_b or path.startswith(sandbox_b + b"/"):
                continue
            found.append((path, b"ro" in fields[5].split(b","), os.path.isdir(path)))
    paths = {p for p, _ro, _d in found}
    return tuple(sorted((p, ro, d) for p, ro, d in found
                        if not any(p.startswith(q + b"/") for q in paths if q != p)))


def _bind_again(view, sources):
    """Bind the host folders of ``view.binds`` (open as ``sources``) into the new /tmp at their own paths."""
    for (path, read_only, is_dir), fd in zip(view.binds, sources):
        os.makedirs(os.path.dirname(path), 0o755, exist_ok=True)
        if is_dir:
            os.mkdir(path, 0o755)
        else:
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o444))
        _mount(b"/proc/self/fd/%d" % fd, path, None, _MS_BIND | _MS_REC)
        if read_only:
            _mount(None, path, None, _MS_REMOUNT | _MS_BIND | _MS_RDONLY | _MS_NOSUID | _MS_NODEV)
    for top in view.read_only_tops:
        _mount(top, top, None, _MS_BIND | _MS_REC)
        _mount(None, top, None, _MS_REMOUNT | _MS_BIND | _MS_RDONLY | _MS_NOSUID | _MS_NODEV)


def _enter_own_view(view):
    """Give this new state a ``/tmp`` and ``/dev/shm`` of its own, then drop every capability.

    A new user namespace (the kernel lets an unprivileged process make one; it maps only our own uid) gives the
    right to a new mount namespace, where ``/tmp`` is a fresh tmpfs holding a copy of the parent's ``/tmp`` files
    and the sandbox folder (bound again from the view we came from), and ``/dev/shm`` a fresh, empty tmpfs.
    Another state's ``/tmp`` and ``/dev/shm`` files are out of sight, both are capped in size, and their memory
    is given back when the state ends (it used to stay until the whole sandbox closed). The mounts come from a
    namespace that cannot unmount them once the capabilities are dropped (a nested namespace sees them locked).
    Other states' workspaces are on the same disk folder but unreachable: ``states/`` cannot be listed and
    workspace names carry a random part (``sandbox.runtime.workspace``)."""
    _prctl(_PR_SET_DUMPABLE, 1, 0, 0, 0)  # else /proc/self/uid_map belongs to root after the uid drop
    _check(_unshare(_CLONE_NEWUSER | _CLONE_NEWNS), "unshare")
    for name, text in view.id_maps:
        fd = os.open(name, os.O_WRONLY)
        try:
            os.write(fd, text)
        finally:
            os.close(fd)
    _mount(None, b"/", None, _MS_REC | _MS_PRIVATE)
    sandbox_dir = os.open(view.mount, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    bound = [os.open(path, os.O_PATH | os.O_CLOEXEC) for path, _ro, _is_dir in view.binds]
    old_tmp = os.open("/tmp", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    old_home = os.open(view.home, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        _mount(b"tmpfs", b"/tmp", b"tmpfs", _MS_NOSUID | _MS_NODEV, view.tmp_options)
        os.mkdir(view.mount, 0o755)  # /tmp is the fresh tmpfs: the mount point is its only folder so far
        _mount(b"/proc/self/fd/%d" % sandbox_dir, view.mount_b, None, _MS_BIND | _MS_REC)
        _bind_again(view, bound)
        names = [name for name in os.listdir(old_tmp) if name not in view.skip]
        new_tmp = os.open("/tmp", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            if names:
                _copy_named(old_tmp, new_tmp, names)
            # HOME (IPython's and matplotlib's settings and caches) is the state's own too: a copy of its parent's,
            # on this tmpfs, bound over the shared folder; a cell's matplotlibrc reaches its branches only
            os.mkdir(_OWN_HOME, 0o755, dir_fd=new_tmp)
            own_home = os.open(_OWN_HOME, _DIR_FLAGS, dir_fd=new_tmp)
            try:
                _copy_tree(old_home, own_home)
            finally:
                os.close(own_home)
        finally:
            os.close(new_tmp)
        _mount(view.own_home_b, view.home_b, None, _MS_BIND)
    finally:
        os.close(old_home)
        os.close(old_tmp)
        os.close(sandbox_dir)
        for fd in bound:
            os.close(fd)
    _mount(b"tmpfs", b"/dev/shm", b"tmpfs", _MS_NOSUID | _MS_NODEV, view.shm_options)
    _prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)
    _drop_capabilities()


def _copy_named(src_fd, dst_fd, names):
    for name in names:
        try:
            info = os.stat(name, dir_fd=src_fd, follow_symlinks=False)
            if stat.S_ISLNK(info.st_mode):
                os.symlink(os.readlink(name, dir_fd=src_fd), name, dir_fd=dst_fd)
            elif stat.S_ISDIR(info.st_mode):
                os.mkdir(name, info.st_mode & 0o7777, dir_fd=dst_fd)
                sub_src = os.open(name, _DIR_FLAGS, dir_fd=src_fd)
                sub_dst = os.open(name, _DIR_FLAGS, dir_fd=dst_fd)
                try:
                    _copy_tree(sub_src, sub_dst)
                finally:
                    os.close(sub_src)
                    os.close(sub_dst)
            elif stat.S_ISREG(info.st_mode):
                _copy_file(name, src_fd, dst_fd, info)
        except OSError:
            pass  # a file of the parent's /tmp that cannot be copied (full, vanished) is not worth a failed branch


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def _drop_capabilities():
    """No capability left (those of the new user namespace included) and none to be gained by exec."""
    _check(_prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")
    for cap in _CAPABILITIES:
        if _prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            break  # EINVAL past the last capability this kernel knows
    _check(_libc.capset(_CAP_HEADER_REF, _NO_CAPS_REF), "capset")


def _known_capabilities():
    try:
        with open("/proc/sys/kernel/cap_last_cap", encoding="ascii") as fh:
            return range(int(fh.read()) + 1)
    except (OSError, ValueError):
        return range(64)


# made once, at import (see ``_ViewPlan``): the capabilities this kernel knows, capset's header and empty sets
_CAPABILITIES = _known_capabilities()
_CAP_HEADER = _CapHeader(0x20080522, 0)
_NO_CAPS = (_CapData * 2)()
_CAP_HEADER_REF, _NO_CAPS_REF = ctypes.byref(_CAP_HEADER), ctypes.byref(_NO_CAPS)


def _reap(_signum, _frame):
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        _report_end(pid, status)


def _report_end(pid, status):
    """The host ends states with SIGKILL; any other end of a runtime is worth a line (a state that dies before its
    hello is reported with the runtimes' last stderr lines: ``runtime.Zygote.died_starting``)."""
    if os.WIFSIGNALED(status) and os.WTERMSIG(status) != signal.SIGKILL:
        _report(b"runtime %d ended by signal %s" % (pid, signal.Signals(os.WTERMSIG(status)).name.encode()))
    elif os.WIFEXITED(status) and os.WEXITSTATUS(status) != 0:
        _report(b"runtime %d exited with status %d" % (pid, os.WEXITSTATUS(status)))


#: The host's stderr pipe (a dup made before fds 0-2 go to /dev/null), or 2 before ``_start`` made it.
_REPORT_FD = 2


def _report(message):
    """One line to the host's stderr pipe, which the host keeps the tail of (``runtime.Zygote.stderr_tail``)."""
    try:
        os.write(_REPORT_FD, b"jupiter-sandbox: " + message.replace(b"\n", b" | ") + b"\n")
    except OSError:
        pass


def _protect_zygote(uid):
    """Work as ``uid`` but keep real and saved uid 0: files the zygote makes belong to the cells' user, and cells
    (all of whose ids are ``uid``) cannot signal it (``kill(-1)`` from a cell used to end the whole sandbox). The
    effective capabilities go with the effective uid; a forked state drops the rest (``_drop_to_cell_user``)."""
    os.setgroups([])
    os.setresgid(0, uid, 0)
    os.setresuid(0, uid, 0)


def _drop_to_cell_user(rlimits):
    """In a state forked from the zygote: every uid and gid becomes the cells' (an unprivileged process may set
    them to its current effective id), then the per-user process rlimit applies."""
    uid, gid = os.geteuid(), os.getegid()
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)
    if rlimits.get("nproc") is not None:
        resource.setrlimit(resource.RLIMIT_NPROC, (int(rlimits["nproc"]),) * 2)


def _warm_tracebacks(shell):
    """Format a few typical tracebacks once, in the zygote, with the shell's own formatter.

    IPython formats a traceback with ``stack_data``/``executing``, which parse the whole source file of every frame
    and cache the result per process: the first pandas ``KeyError`` in a state parses ``pandas/core/frame.py`` and
    ``indexes/base.py`` (~0.5 s of CPU and ~40 MiB). Every state is forked from the zygote, so without this each
    state's first erroring cell paid that again: most of the CPU of a search tree of the simulated policy (an
    erroring cell in a fresh state ~520 ms of CPU, warmed ~70 ms). The traceback text does not change."""
    import pandas

    for make in (lambda: pandas.DataFrame({"a": [1]})["b"], lambda: pandas.Series([1.0]).meen(),
                 lambda: eval("undefined_name_")):  # a fixed expression
        try:
            make()
        except Exception:  # the point is to format whatever it raised
            try:
                shell.InteractiveTB.structured_traceback(*sys.exc_info())
            except Exception:  # a warm-up that fails only leaves the caches cold
                pass
    shell.InteractiveTB.tb = None  # no frames of the warm-up kept alive


def _start(settings):
    _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    host = settings.get("host_pid")
    if host is not None and os.getppid() != host:
        os._exit(0)  # the host died before we were set to die with it: nobody is left to serve
    _libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    # bubblewrap starts its own session inside the one the host started for us: set that session's share too,
    # before the uid drop (after it, /proc/self belongs to root: the process is no longer dumpable)
    limits.lower_priority(settings.get("nice", 0), own_session=True)
    rlimits = dict(settings.get("rlimits", {}))
    if settings.get("uid") is not None:
        _protect_zygote(int(settings["uid"]))
        rlimits.pop("nproc", None)  # per runtime uid: set in each state after its uid drop (``_become_child``)
    limits.apply_limits(rlimits)
    signal.signal(signal.SIGCHLD, _reap)
    global _REPORT_FD
    _REPORT_FD = os.dup(2)  # the host's stderr pipe, kept for our own last words (``_report``); not the cells'
    os.set_inheritable(_REPORT_FD, False)
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    os.close(devnull)
    builtins.input = _no_input
    import getpass

    getpass.getpass = _no_input
    os.chdir(settings["home"])
    server = Server(settings)
    preloaded = []
    for module in settings.get("preload", []):
        try:
            importlib.import_module(module)
            preloaded.append(module)
        except ImportError:
            pass
    check = server._run({"code": "1+1"})
    if "pandas" in preloaded:
        _warm_tracebacks(server.shell)
    server.shell.reset(new_session=False)
    server.shell.execution_count = 1
    return server, preloaded, check


def main():
    settings = json.loads(sys.argv[1])
    try:
        server, preloaded, check = _start(settings)
    except BaseException as exc:  # report any start-up failure to the host, then exit
        protocol.send_frame(socket.socket(fileno=int(settings["fd"])), {
            "op": "hello", "error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()})
        os._exit(3)
    protocol.send_frame(server.conn, {"op": "hello", "pid": os.getpid(), "preloaded": preloaded,
                                      "self_check": check, "threads": server._threads(), "uid": os.getuid()})
    server.serve()


if __name__ == "__main__":
    main()
