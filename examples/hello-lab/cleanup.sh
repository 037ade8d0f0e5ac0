#!/bin/bash
# Undoes what hello-lab's setup.sh did to this machine: the `student` user
# (and its home) and the login banner. For lab authors who ran
# `labctl try examples/hello-lab` on their own machine; a lab VM is simply
# thrown away.
set -eu
[ "$(id -u)" -eq 0 ] || { echo "hello-lab cleanup: must run as root" >&2; exit 1; }
rm -f /etc/profile.d/hello-lab-banner.sh
if id -u student >/dev/null 2>&1; then
    userdel --remove student 2>/dev/null || deluser --remove-home student
fi
echo "hello-lab cleanup: removed the student user and the banner"
