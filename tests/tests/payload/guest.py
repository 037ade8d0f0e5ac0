#!/usr/bin/python3
"""Deliver a lab-agent Secret the way the cluster and a guest's cloud-init do.

usage: guest.py SECRET REPORT [APPLETS]

Meant to run as root inside a throw-away copy of the machine (an overlay
chroot, see support.rs), where every file it writes lands in the overlay's
upper dir. It reads the Secret manifest (JSON if it starts with `{`, else
YAML), base64-decodes `data.userdata`, and then does with it what Debian's
cloud-init 22.4 does on a first boot, with cloud-init's own code:

1. `UserDataProcessor` splits the MIME message into parts with the content
   types cloud-init assigns;
2. the default part handlers (those of `Init._default_handlers`) walk the
   parts, as `Init._do_handlers` does: the cloud-config handler merges the
   cloud-config into `cloud-config.txt`, the per-instance script handler
   writes the installer to `/var/lib/cloud/scripts/per-instance/`;
3. `bootcmd` runs (network stage, as `cc_bootcmd` runs it: shellified);
4. `write_files` writes the token, unit and drop-in (`cc_write_files`);
5. the per-instance scripts run (`cc_scripts_per_instance`: `runparts`).

With APPLETS (a folder of busybox applet links), the installer runs under
busybox's `sh` with only those tools on PATH, as on a busybox system.
`runcmd` is not run (it starts services). REPORT gets one JSON object: the
parts, the cloud-config's keys, bootcmd, runcmd and the script cloud-init
makes of it, the write_files entries, the Secret's metadata, and sizes.
Any warning or error logged by cloud-init fails the run (its handlers log
exceptions instead of raising them).
"""
import base64
import json
import logging
import os
import sys

import yaml
from cloudinit import handlers, helpers, safeyaml, subp, util
from cloudinit.config import cc_write_files
from cloudinit.handlers.boot_hook import BootHookPartHandler
from cloudinit.handlers.cloud_config import CloudConfigPartHandler
from cloudinit.handlers.jinja_template import JinjaTemplatePartHandler
from cloudinit.handlers.shell_script import ShellScriptPartHandler
from cloudinit.handlers.shell_script_by_frequency import (
    ShellScriptByFreqPartHandler,
)
from cloudinit.settings import PER_ALWAYS, PER_INSTANCE, PER_ONCE
from cloudinit.user_data import UserDataProcessor

CLOUD_DIR = "/var/lib/cloud"
INSTANCE_ID = "iid-payload-test"


class Complaints(logging.Handler):
    """Collects what cloud-init logs at WARNING and above."""

    def __init__(self):
        super().__init__(logging.WARNING)
        self.seen = []

    def emit(self, record):
        self.seen.append(self.format(record))


class Datasource:
    """What `helpers.Paths` asks of a datasource: the instance id."""

    def get_instance_id(self):
        return INSTANCE_ID


def load_secret(path):
    with open(path, "rb") as f:
        raw = f.read()
    secret = json.loads(raw) if raw.lstrip().startswith(b"{") else yaml.safe_load(raw)
    assert secret["apiVersion"] == "v1", secret["apiVersion"]
    assert secret["kind"] == "Secret", secret["kind"]
    assert secret["type"] == "Opaque", secret["type"]
    assert list(secret["data"]) == ["userdata"], list(secret["data"])
    return secret, base64.b64decode(secret["data"]["userdata"], validate=True)


def run_handlers(msg, paths):
    """`Init._do_handlers` for user-data, first boot (PER_INSTANCE)."""
    opts = {"paths": paths, "datasource": paths.datasource}
    cloudconfig = CloudConfigPartHandler(**opts)
    shellscript = ShellScriptPartHandler(**opts)
    defaults = [
        cloudconfig,
        shellscript,
        ShellScriptByFreqPartHandler(PER_ALWAYS, **opts),
        ShellScriptByFreqPartHandler(PER_INSTANCE, **opts),
        ShellScriptByFreqPartHandler(PER_ONCE, **opts),
        BootHookPartHandler(**opts),
        JinjaTemplatePartHandler(**opts, sub_handlers=[cloudconfig, shellscript]),
    ]
    c_handlers = helpers.ContentHandlers()
    for mod in defaults:
        c_handlers.register(mod, overwrite=False)
    data = None  # the Cloud object; no default handler reads it
    for _ctype, mod in c_handlers.items():
        if mod not in c_handlers.initialized:
            handlers.call_begin(mod, data, PER_INSTANCE)
            c_handlers.initialized.append(mod)
    part_data = {
        "handlers": c_handlers,
        "handlerdir": paths.get_ipath("handlers"),
        "data": data,
        "frequency": PER_INSTANCE,
        "handlercount": 0,
        "excluded": [],
    }
    try:
        handlers.walk(msg, handlers.walker_callback, data=part_data)
    finally:
        for _ctype, mod in c_handlers.items():
            if mod in c_handlers.initialized:
                c_handlers.initialized.remove(mod)
                handlers.call_end(mod, data, PER_INSTANCE)


def main(secret_path, report_path, applets=None):
    complaints = Complaints()
    logging.getLogger().addHandler(complaints)
    logging.getLogger().setLevel(logging.DEBUG)

    secret, user_data = load_secret(secret_path)
    paths = helpers.Paths({"cloud_dir": CLOUD_DIR}, ds=Datasource())
    msg = UserDataProcessor(paths).process(user_data)
    parts = [
        {
            "content_type": part.get_content_type(),
            "filename": part.get_filename(),
            "bytes": len(part.get_payload(decode=True) or b""),
        }
        for part in msg.walk()
        if not part.is_multipart()
    ]
    run_handlers(msg, paths)

    config = safeyaml.load(util.load_file(paths.get_ipath("cloud_config")))
    assert isinstance(config, dict), type(config)

    # Network stage: bootcmd, then write_files.
    bootcmd = util.shellify(config.get("bootcmd", []))
    subp.subp(["/bin/sh", "-c", bootcmd], capture=True)
    cc_write_files.write_files("write_files", config["write_files"], "root:root")

    # Final stage: scripts-per-instance, before scripts-user (runcmd).
    script_dir = os.path.join(paths.get_cpath("scripts"), "per-instance")
    scripts = sorted(os.listdir(script_dir)) if os.path.isdir(script_dir) else []
    failed = None
    prefix = None
    if applets:
        prefix = [os.path.join(applets, "sh")]
        os.environ["PATH"] = applets
    try:
        subp.runparts(script_dir, exe_prefix=prefix)
    except RuntimeError as e:
        failed = str(e)

    report = {
        "parts": parts,
        "keys": sorted(config),
        "bootcmd": config.get("bootcmd"),
        "runcmd": config.get("runcmd"),
        "runcmd_script": util.shellify(config.get("runcmd", [])),
        "files": [
            {
                "path": entry["path"],
                "permissions": entry.get("permissions"),
                "encoding": entry.get("encoding"),
                "owner": entry.get("owner"),
            }
            for entry in config["write_files"]
        ],
        "per_instance_scripts": scripts,
        "per_instance_failed": failed,
        "metadata": secret["metadata"],
        "user_data_len": len(user_data),
        "complaints": complaints.seen,
    }
    with open(report_path, "w") as f:
        json.dump(report, f)


if __name__ == "__main__":
    main(*sys.argv[1:])
