"""Fixtures for mtad's integration tests; the helpers they use are in
mtadtest.py.

Every test gets its own directory under /dev/shm (tmpfs, like production),
a relay.yaml written from a dict, random free loopback ports, and an mtad
started in the foreground and stopped by its pid.  When the tests run as
root, mtad drops privileges to the system user 'mtad', created here if
missing.  The directory is root's and 0755: traversable, but not writable
by the workers' user (mtad refuses a pid file, control socket or routes db
in a directory the workers could change); a Maildir the workers deliver
into is made with worker_dir().
"""
import os
import shutil
import tempfile

import pytest

from mtadtest import Blackhole, DnsServers, Mtad, SignedDns, Sink, ensure_user


@pytest.fixture(scope="session", autouse=True)
def _system_user():
    ensure_user()


@pytest.fixture
def workdir():
    d = tempfile.mkdtemp(prefix="mtad-test-", dir="/dev/shm")
    os.chmod(d, 0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def mtad_factory(workdir):
    """Make (not start) an Mtad; every one made is stopped afterwards."""
    made = []

    def make(overrides=None, subdir=None):
        d = workdir
        if subdir:
            d = os.path.join(workdir, subdir)
            os.makedirs(d, exist_ok=True)
            os.chmod(d, 0o755)
        m = Mtad(d, overrides)
        made.append(m)
        return m

    yield make
    for m in made:
        m.stop()


@pytest.fixture
def mtad(mtad_factory):
    """A started mtad with the default test config."""
    return mtad_factory().start()


@pytest.fixture
def sink_factory():
    """Make and start sinks; every one is stopped after the test."""
    made = []

    def make(**kw):
        s = Sink(**kw).start()
        made.append(s)
        return s

    yield make
    for s in made:
        s.stop()


@pytest.fixture
def sink(sink_factory):
    return sink_factory()


@pytest.fixture(scope="module")
def dns_servers():
    d = tempfile.mkdtemp(prefix="mtad-dns-", dir="/dev/shm")
    servers = DnsServers(d)
    try:
        yield servers
    finally:
        servers.stop()
        shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="module")
def signed_dns():
    d = tempfile.mkdtemp(prefix="mtad-dnssec-", dir="/dev/shm")
    servers = SignedDns(d)
    try:
        yield servers
    finally:
        servers.stop()
        shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def hole():
    """A next hop that accepts connections and never answers."""
    b = Blackhole()
    yield b
    b.close()
