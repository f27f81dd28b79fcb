"""TLS through pynng: the client verifies the server's certificate and
presents its own, against a pynng REP server on loopback TCP.

This tests the client's side of TLS (the daemon's side is tsdfd's own
work); the certificates are made with the openssl command, and the tests
are skipped, saying so, where it is missing.
"""

import shutil
import subprocess
import threading

import msgpack
import pynng
import pytest

import tsdf
from tsdf import ErrorCode, TsdfError

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None,
                                reason="the openssl command is needed to make certificates")


def _openssl(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    """A CA, a server certificate for "localhost" and a client certificate,
    both signed by the CA, and a second CA that signed nothing."""
    d = tmp_path_factory.mktemp("pki")
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    for ca in ("ca", "other-ca"):
        _openssl("req", "-x509", *ec, "-keyout", f"{ca}.key", "-out", f"{ca}.pem", "-days", "2",
                 "-subj", f"/CN=tsdf test {ca}", cwd=d)
    (d / "san.ext").write_text("subjectAltName=DNS:localhost\n")
    for who in ("server", "client"):
        _openssl("req", *ec, "-keyout", f"{who}.key", "-out", f"{who}.csr",
                 "-subj", f"/CN={'localhost' if who == 'server' else 'tsdf-client'}", cwd=d)
        _openssl("x509", "-req", "-in", f"{who}.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
                 "-CAcreateserial", "-days", "2", "-out", f"{who}.pem",
                 *(["-extfile", "san.ext"] if who == "server" else []), cwd=d)
    return d


@pytest.fixture
def tls_server(pki):
    """A REP server that requires a client certificate and answers pings;
    yields its URL."""
    config = pynng.TLSConfig(pynng.TLSConfig.MODE_SERVER,
                             own_cert_string=(pki / "server.pem").read_text(),
                             own_key_string=(pki / "server.key").read_text(),
                             ca_files=[str(pki / "ca.pem")],
                             auth_mode=pynng.TLSConfig.AUTH_MODE_REQUIRED)
    rep = pynng.Rep0(tls_config=config, recv_timeout=100)
    listener = rep.listen("tls+tcp://127.0.0.1:0")
    # Parsed from the address's text: pynng 0.9's .port is in network byte order.
    port = int(str(listener.local_address).rsplit(":", 1)[1])
    stop = threading.Event()

    def serve():
        while not stop.is_set():
            try:
                req = msgpack.unpackb(rep.recv())
            except pynng.Timeout:
                continue
            except pynng.Closed:
                return
            rep.send(msgpack.packb({"v": 1, "type": req["type"], "id": req["id"], "status": 0,
                                    "server": "tls-test", "uptime_ms": 1}))

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield f"tls+tcp://localhost:{port}"
    stop.set()
    thread.join(5)
    rep.close()


def test_mutual_tls(pki, tls_server):
    with tsdf.Client(tls_server, tls_ca=pki / "ca.pem", tls_cert=pki / "client.pem",
                     tls_key=pki / "client.key", timeout_ms=60000) as c:
        assert c.ping().server == "tls-test"


def test_server_name_override(pki, tls_server):
    url = tls_server.replace("localhost", "127.0.0.1")
    with tsdf.Client(url, tls_ca=pki / "ca.pem", tls_cert=pki / "client.pem",
                     tls_key=pki / "client.key", tls_server_name="localhost",
                     timeout_ms=60000) as c:
        assert c.ping().server == "tls-test"


def test_untrusted_server_is_refused(pki, tls_server):
    with pytest.raises(TsdfError):
        with tsdf.Client(tls_server, tls_ca=pki / "other-ca.pem", tls_cert=pki / "client.pem",
                         tls_key=pki / "client.key", timeout_ms=2000) as c:
            c.ping()


def test_tls_arguments_are_checked():
    with pytest.raises(tsdf.ArgumentError) as e:
        tsdf.Client("ipc:///nonexistent/x.sock", tls_ca="ca.pem")
    assert e.value.code is ErrorCode.INVAL
    with pytest.raises(tsdf.ArgumentError):
        tsdf.Client("tls+tcp://localhost:1")  # no tls_ca
    with pytest.raises(tsdf.ArgumentError):
        tsdf.Client("tls+tcp://localhost:1", tls_ca="ca.pem", tls_cert="c.pem")  # no key
