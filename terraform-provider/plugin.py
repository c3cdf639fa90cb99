"""``terraform-provider-enclave``: serves the provider to OpenTofu over go-plugin's gRPC protocol.

What OpenTofu (go-plugin's client) does, and what this side answers:

1. it starts this program with ``TF_PLUGIN_MAGIC_COOKIE``, ``PLUGIN_PROTOCOL_VERSIONS`` (the
   tfplugin versions it speaks, ``5,6``) and, for automatic mutual TLS, ``PLUGIN_CLIENT_CERT``
   (its own certificate, PEM). Without the cookie this program says it is a plugin and exits 1;
2. it reads one line on stdout, ``1|6|unix|<socket>|grpc|<certificate>``: go-plugin's protocol
   1, tfplugin6, a Unix socket in a private directory, and this process's fresh self-signed
   certificate (DER, base64 without padding). Nothing else is ever written to stdout;
3. it connects over TLS trusting only that certificate, and this server accepts only the
   client certificate it was given;
4. it calls ``tfplugin6.Provider`` (tfcompat.EnclaveServicer), and ends with
   ``plugin.GRPCController/Shutdown`` or a kill. SIGINT is ignored, as go-plugin does: OpenTofu
   handles Ctrl-C and calls StopProvider.

tf 1.2.0 ships a runner (``tf.runner.run_provider``) that this replaces: it ignores the cookie
and ``PLUGIN_CLIENT_CERT`` (so any local process could call the provider), reuses a 1024-bit RSA
key cached in ``~/.cache/tf-python-provider``, and stops serving on StopProvider or Ctrl-C,
cutting off an apply in flight. tf's generated gRPC code and servicer are reused.
"""

from __future__ import annotations

import asyncio
import base64
import datetime
import os
import shutil
import signal
import ssl
import sys
import tempfile
import threading
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Optional

MAGIC_COOKIE_KEY = "TF_PLUGIN_MAGIC_COOKIE"
MAGIC_COOKIE_VALUE = "d602bf8f470bc67ca7faa0386276bbdd4330efaf76d1a219cb4d6991ca9872b2"
CORE_PROTOCOL_VERSION = 1  #: go-plugin's own handshake protocol
APP_PROTOCOL_VERSION = 6  #: tfplugin6
WORKERS = 32  #: RPC threads; OpenTofu runs up to -parallelism (default 10) operations at once
SHUTDOWN_GRACE = 2.0  #: seconds in-flight calls get after Shutdown
MAX_MESSAGE = 256 * 1024 * 1024  #: bytes, OpenTofu's own gRPC message limit
CERT_DAYS = 30  #: validity of the per-process certificate
TLS_HANDSHAKE_TIMEOUT = 10.0  #: seconds
PIPE_CHUNK = 256 * 1024  #: bytes read at a time between TLS and gRPC

NOT_A_COMMAND = ("This binary is a plugin. These are not meant to be executed directly.\n"
                 "Please execute the program that consumes these plugins, which will\n"
                 "load any plugins automatically")


def self_signed_certificate() -> tuple[bytes, bytes, bytes]:
    """A fresh ECDSA P-256 key and a self-signed certificate for ``localhost``, good for server
    and client auth: (certificate PEM, key PEM, certificate DER). Kept in memory only."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost"),
                      x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Enclave Queues")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(seconds=30))
        .not_valid_after(now + datetime.timedelta(days=CERT_DAYS))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]), critical=False)
        .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False, key_encipherment=False,
                                     data_encipherment=False, key_agreement=True, key_cert_sign=True,
                                     crl_sign=False, encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
                       critical=False)
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
    return cert.public_bytes(serialization.Encoding.PEM), key_pem, cert.public_bytes(serialization.Encoding.DER)


def tls_context(cert_pem: bytes, key_pem: bytes, client_cert_pem: str, private_dir: str) -> ssl.SSLContext:
    """The server side of go-plugin's automatic mutual TLS: our certificate, and only the client
    certificate OpenTofu passed in PLUGIN_CLIENT_CERT accepted; HTTP/2 by ALPN (grpc-go insists)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.verify_mode = ssl.CERT_REQUIRED
    context.load_verify_locations(cadata=client_cert_pem)
    context.set_alpn_protocols(["h2"])
    # ssl loads keys from files only: write it into the private (0700) directory and remove it
    cert_file, key_file = os.path.join(private_dir, "server.crt"), os.path.join(private_dir, "server.key")
    for path, data in ((cert_file, cert_pem), (key_file, key_pem)):
        with os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as out:
            out.write(data)
    try:
        context.load_cert_chain(cert_file, key_file)
    finally:
        os.unlink(key_file)
        os.unlink(cert_file)
    return context


class TlsFront:
    """Mutual TLS in front of the gRPC server, done with Python's ssl (OpenSSL) on an asyncio
    loop in a thread, each connection piped to gRPC's private socket.

    Why not grpcio's own TLS: go-plugin's client certificate is an ECDSA P-521 key, and
    grpcio's BoringSSL does not accept ecdsa_secp521r1_sha512 signatures, so with
    ``require_client_auth`` OpenTofu's TLS 1.3 handshake fails (NO_COMMON_SIGNATURE_ALGORITHMS);
    tf 1.2.0's runner avoids it by not asking for a client certificate at all. OpenSSL accepts it.
    """

    def __init__(self, path: str, backend_path: str, context: ssl.SSLContext) -> None:
        self.path, self.backend_path, self.context = path, backend_path, context
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="tls-front", daemon=True)
        self._server: Optional[asyncio.AbstractServer] = None

    def start(self) -> None:
        self._thread.start()
        self._server = asyncio.run_coroutine_threadsafe(asyncio.start_unix_server(
            self._connection, path=self.path, ssl=self.context, ssl_handshake_timeout=TLS_HANDSHAKE_TIMEOUT),
            self._loop).result(TLS_HANDSHAKE_TIMEOUT)

    def stop(self) -> None:
        """Close the listener and every connection, then end the loop's thread."""
        try:
            asyncio.run_coroutine_threadsafe(self._close(), self._loop).result(SHUTDOWN_GRACE)
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(SHUTDOWN_GRACE)

    async def _close(self) -> None:
        if self._server is not None:
            self._server.close()
        tasks = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            backend_reader, backend_writer = await asyncio.open_unix_connection(self.backend_path)
        except OSError:
            writer.close()
            return
        await asyncio.gather(_pipe(reader, backend_writer), _pipe(backend_reader, writer))


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(PIPE_CHUNK):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, ssl.SSLError, OSError):
        pass
    finally:
        writer.close()


def _health_check(request: bytes, context: Any) -> bytes:
    return b"\x08\x01"  # grpc.health.v1.HealthCheckResponse{status: SERVING}: go-plugin's Ping


def serve(env: Optional[Mapping[str, str]] = None) -> int:
    """Run the plugin until OpenTofu shuts it down; returns the exit code."""
    env = os.environ if env is None else env
    if env.get(MAGIC_COOKIE_KEY) != MAGIC_COOKIE_VALUE:
        print(NOT_A_COMMAND, file=sys.stderr)
        return 1
    signal.signal(signal.SIGINT, signal.SIG_IGN)

    import grpc
    from tf.gen import grpc_controller_pb2, grpc_controller_pb2_grpc, grpc_stdio_pb2_grpc, tfplugin_pb2_grpc

    from .provider import EnclaveProvider
    from .tfcompat import EnclaveServicer

    done = threading.Event()

    class Controller(grpc_controller_pb2_grpc.GRPCControllerServicer):
        def Shutdown(self, request: Any, context: Any) -> Any:
            done.set()
            return grpc_controller_pb2.Empty()

    class Stdio(grpc_stdio_pb2_grpc.GRPCStdioServicer):
        def StreamStdio(self, request: Any, context: Any) -> Any:
            return iter(())  # nothing is written to stdout after the handshake; stderr goes to the log

    provider = EnclaveProvider()
    server = grpc.server(ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="tfplugin"),
                         options=[("grpc.max_receive_message_length", MAX_MESSAGE),
                                  ("grpc.max_send_message_length", MAX_MESSAGE)])
    tfplugin_pb2_grpc.add_ProviderServicer_to_server(EnclaveServicer(provider), server)
    grpc_controller_pb2_grpc.add_GRPCControllerServicer_to_server(Controller(), server)
    grpc_stdio_pb2_grpc.add_GRPCStdioServicer_to_server(Stdio(), server)
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(
        "grpc.health.v1.Health", {"Check": grpc.unary_unary_rpc_method_handler(_health_check)}),))

    socket_dir = tempfile.mkdtemp(prefix="enclave-plugin-", dir=env.get("PLUGIN_UNIX_SOCKET_DIR") or None)
    socket_path = os.path.join(socket_dir, "provider.sock")
    front: Optional[TlsFront] = None
    try:
        client_cert = env.get("PLUGIN_CLIENT_CERT", "")
        if client_cert:
            # gRPC itself listens on a second socket in the same private directory; the
            # announced one is the mutual-TLS front (see TlsFront for why not grpcio's TLS)
            backend_path = os.path.join(socket_dir, "grpc.sock")
            server.add_insecure_port(f"unix:{backend_path}")
            cert_pem, key_pem, cert_der = self_signed_certificate()
            front = TlsFront(socket_path, backend_path, tls_context(cert_pem, key_pem, client_cert, socket_dir))
            announced = base64.b64encode(cert_der).decode().rstrip("=")
        else:  # a client without automatic mTLS: plain gRPC, as go-plugin serves it then
            server.add_insecure_port(f"unix:{socket_path}")
            announced = ""
        server.start()
        if front is not None:
            front.start()
        signal.signal(signal.SIGTERM, lambda *_: done.set())
        sys.stdout.write(f"{CORE_PROTOCOL_VERSION}|{APP_PROTOCOL_VERSION}|unix|{socket_path}|grpc|{announced}\n")
        sys.stdout.flush()
        sys.stdout = sys.stderr  # stdout belongs to go-plugin: a stray print must not corrupt it
        done.wait()
        server.stop(SHUTDOWN_GRACE).wait()  # in-flight calls (Shutdown's own answer) finish first
        if front is not None:
            front.stop()
    finally:
        provider.close()
        shutil.rmtree(socket_dir, ignore_errors=True)
    return 0


def main() -> None:
    sys.exit(serve())


if __name__ == "__main__":
    main()
