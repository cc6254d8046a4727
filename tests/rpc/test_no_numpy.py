"""The Python server starts and serves on a machine without numpy (001's fake-numpy workaround,
solved by importing the runtime lazily)."""

from kiln import rpc

import rpc_services as svc


def test_server_serves_without_numpy(tmp_path):
    blocker = tmp_path / "numpy"
    blocker.mkdir()
    (blocker / "__init__.py").write_text("raise ImportError('numpy is not installed on this device')\n")
    server = svc.server(env={"PYTHONPATH": str(tmp_path)})
    try:
        sess = rpc.connect(svc.HOST, server.port)
        sess.upload(b"payload", target="f.bin")
        assert sess.listdir() == ["f.bin"] and sess.download("f.bin") == b"payload"
        assert sess.get_function("rpc.echo")({"k": [1, 2.0]}) == {"k": [1, 2.0]}
        sess.close()
        assert "numpy is not installed" in server.text()  # the warm-up import was skipped, not fatal
    finally:
        server.stop()
