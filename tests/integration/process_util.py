"""Helpers for the process-model tests: /proc inspection and waiting.

Everything is bounded in time and count; nothing here kills a process that
the test did not start.
"""
import os
import socket
import time


def comm(pid):
    """The process's comm ("mtad: worker"), or None when it is gone."""
    try:
        with open("/proc/%d/comm" % pid) as f:
            return f.read().strip()
    except OSError:
        return None


def proc_status(pid):
    """/proc/PID/status as a dict, or {} when the process is gone."""
    out = {}
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                k, _, v = line.partition(":")
                out[k] = v.strip()
    except OSError:
        pass
    return out


def alive(pid):
    """True while the process exists and is not a zombie."""
    st = proc_status(pid)
    return bool(st) and not st.get("State", "").startswith("Z")


def children(pid):
    try:
        with open("/proc/%d/task/%d/children" % (pid, pid)) as f:
            return [int(x) for x in f.read().split()]
    except OSError:
        return []


def children_by_comm(pid, name):
    return [c for c in children(pid) if comm(c) == name and alive(c)]


def workers(pid):
    return children_by_comm(pid, "mtad: worker")


def wait_for(pred, timeout=10.0, step=0.05, what="condition"):
    """Polls pred() until it returns a true value; returns it or fails."""
    deadline = time.time() + timeout
    last = None
    while time.time() < deadline:
        last = pred()
        if last:
            return last
        time.sleep(step)
    raise AssertionError("timed out waiting for %s (last: %r)" % (what, last))


def greet(port, host="127.0.0.1", timeout=10.0):
    """Connects, returns (local port, greeting bytes)."""
    with socket.create_connection((host, port), timeout=timeout) as s:
        s.settimeout(timeout)
        data = b""
        while b"\r\n" not in data:
            chunk = s.recv(512)
            if not chunk:
                break
            data += chunk
        return s.getsockname()[1], data


def parse_status(text):
    """mtactl status output -> (header dict, list of worker dicts)."""
    head, ws = {}, []
    for line in text.splitlines():
        if line.startswith("worker "):
            ws.append(dict(kv.split("=", 1) for kv in line.split()[1:]))
        elif ": " in line:
            k, _, v = line.partition(": ")
            head[k] = v
    return head, ws
