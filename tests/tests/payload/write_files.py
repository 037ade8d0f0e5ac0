#!/usr/bin/python3
"""Decode a lab-agent Secret the way the cluster and the guest would.

usage: write_files.py SECRET ROOT

Reads the Secret manifest (JSON if it starts with `{`, else YAML via
PyYAML), base64-decodes `data.userdata`, parses it with cloud-init's own YAML
loader, and runs cloud-init's own `write_files` module with every path moved
under ROOT. Prints one JSON object: the top-level keys, bootcmd, runcmd, the
shell script cloud-init makes of runcmd, and per file its owner (recorded,
not applied, so this runs as any user). Exits non-zero on any problem.

Runs under Debian's /usr/bin/python3, where cloud-init is installed.
"""
import base64
import json
import os
import sys

import yaml
from cloudinit import safeyaml, util
from cloudinit.config import cc_write_files


def main(secret_path, root):
    with open(secret_path, "rb") as f:
        raw = f.read()
    if raw.lstrip().startswith(b"{"):
        secret = json.loads(raw)
    else:
        secret = yaml.safe_load(raw)
    assert secret["apiVersion"] == "v1", secret["apiVersion"]
    assert secret["kind"] == "Secret", secret["kind"]
    assert secret["type"] == "Opaque", secret["type"]
    assert list(secret["data"]) == ["userdata"], list(secret["data"])
    user_data = base64.b64decode(secret["data"]["userdata"], validate=True)
    assert user_data.startswith(b"#cloud-config\n"), user_data[:40]
    config = safeyaml.load(user_data)
    assert isinstance(config, dict), type(config)

    owners = {}

    def record_owner(path, user, group):
        owners[path] = "%s:%s" % (user, group)

    util.chownbyname = record_owner
    files = []
    for entry in config["write_files"]:
        moved = dict(entry)
        moved["path"] = os.path.join(root, entry["path"].lstrip("/"))
        files.append(moved)
    cc_write_files.write_files("write_files", files, "root:root")

    json.dump(
        {
            "keys": sorted(config),
            "bootcmd": config.get("bootcmd"),
            "runcmd": config.get("runcmd"),
            "runcmd_script": util.shellify(config.get("runcmd", [])),
            "files": [
                {
                    "path": entry["path"],
                    "permissions": entry.get("permissions"),
                    "encoding": entry.get("encoding"),
                    "owner": owners.get(moved["path"]),
                }
                for entry, moved in zip(config["write_files"], files)
            ],
            "metadata": secret["metadata"],
            "user_data_len": len(user_data),
        },
        sys.stdout,
    )


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
