"""The tracker summary as query_rpc_tracker prints it (document 001's layout)."""

from kiln.rpc.tracker_client import format_summary


def test_servers_behind_one_proxy_share_one_line():
    summary = {"server_info": [
        {"key": "server:proxy[K1]", "addr": ["10.0.0.9", 9090]},
        {"key": "rk3399", "addr": ["10.0.0.5", 9091]},
        {"key": "server:proxy[K0]", "addr": ["10.0.0.9", 9090]},
        {"key": "server:proxy[K2]", "addr": ["10.0.0.9", 9090]},
        {"key": "server:proxy[K0]", "addr": ["10.0.0.9", 9090]},
        {"key": "server:proxy[K9]", "addr": ["10.0.0.8", 9090]},
    ], "queue_info": {"K0": {"total": 2, "free": 2, "pending": 0}}}
    text = format_summary(summary, "10.0.0.1:9190")
    assert text.splitlines() == [
        "Tracker address 10.0.0.1:9190", "",
        "Server List", "----------------------------", "server-address key", "----------------------------",
        "10.0.0.9:9090 server:proxy[K0,K1,K2]",
        "10.0.0.5:9091 rk3399",
        "10.0.0.8:9090 server:proxy[K9]",
        "----------------------------", "",
        "Queue Status", "---------------------------------------", "key total free pending",
        "---------------------------------------", "K0 2 2 0", "---------------------------------------"]
