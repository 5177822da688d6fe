#!/usr/bin/env python3
"""Checks the LaunchAgent: the template parses with plistlib and has the keys launchd needs, and
install.sh --print fills it into a valid plist with absolute paths (runs on Linux too).

usage: check_plist.py LAUNCHD_DIR EBB_BINARY
"""
import os
import plistlib
import subprocess
import sys
import tempfile


def check(d, filled):
    assert d["Label"] == "org.ebb.server", d["Label"]
    args = d["ProgramArguments"]
    assert isinstance(args, list) and args[1:] == ["serve"], args
    assert d["RunAtLoad"] is True
    assert "KeepAlive" in d
    assert isinstance(d["EnvironmentVariables"], dict) and "PATH" in d["EnvironmentVariables"]
    for k in ("StandardOutPath", "StandardErrorPath"):
        assert "Library/Logs/ebb/" in d[k] or "@LOG_DIR@" in d[k], d[k]
    if filled:
        assert os.path.isabs(args[0]) and os.access(args[0], os.X_OK), args[0]
        for k in ("StandardOutPath", "StandardErrorPath", "WorkingDirectory"):
            assert "@" not in d[k] and os.path.isabs(d[k]), (k, d[k])
        for v in d["EnvironmentVariables"].values():
            assert "@" not in v, v


def main():
    launchd, ebb = sys.argv[1], os.path.abspath(sys.argv[2])
    with open(os.path.join(launchd, "org.ebb.server.plist"), "rb") as f:
        check(plistlib.load(f), filled=False)
    with tempfile.TemporaryDirectory() as home:
        # A home with characters that need escaping in XML and in sed.
        home = os.path.join(home, "a b&c")
        os.mkdir(home)
        env = dict(os.environ, HOME=home)
        out = subprocess.run(["sh", os.path.join(launchd, "install.sh"), "--bin", ebb, "--print"],
                             env=env, capture_output=True, check=True, timeout=20).stdout
        d = plistlib.loads(out)
        check(d, filled=True)
        assert d["ProgramArguments"][0] == ebb
        assert d["StandardErrorPath"] == home + "/Library/Logs/ebb/ebb.log", d["StandardErrorPath"]
        # --no-load writes the agent where launchd looks for it, and uninstall.sh removes it.
        subprocess.run(["sh", os.path.join(launchd, "install.sh"), "--bin", ebb, "--no-load"],
                       env=env, check=True, capture_output=True, timeout=20)
        dest = os.path.join(home, "Library/LaunchAgents/org.ebb.server.plist")
        with open(dest, "rb") as f:
            check(plistlib.load(f), filled=True)
        assert os.path.isdir(os.path.join(home, "Library/Logs/ebb"))
        subprocess.run(["sh", os.path.join(launchd, "uninstall.sh")], env=env, check=True,
                       capture_output=True, timeout=20)
        assert not os.path.exists(dest)
    print("ok: plist template and install.sh output parse with the required keys")


if __name__ == "__main__":
    main()
